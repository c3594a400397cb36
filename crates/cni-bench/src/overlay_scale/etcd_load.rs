//! The load the agents put on etcd, from etcd's own `/metrics` (on its client port): the
//! gRPC messages it received (one per request: the HTTP gateway the agents use opens one
//! gRPC call per request, a keep-alive included) and the watch events it sent.

use std::net::SocketAddr;
use std::time::Instant;

use cni_testkit::scrape::{get, Samples};

use crate::{Error, Result};

/// One scrape of etcd's counters.
#[derive(Debug, Clone, Copy)]
pub struct EtcdCounters {
    pub at: Instant,
    /// Every gRPC message received: the agents' requests.
    pub requests: f64,
    /// Of those, lease keep-alives.
    pub keepalives: f64,
    /// Messages sent on watch streams (events and progress).
    pub watch_messages: f64,
}

/// The client port of an `http://IP:PORT` endpoint.
pub fn metrics_address(endpoint: &str) -> Result<SocketAddr> {
    endpoint
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Error::Setup(format!("etcd endpoint {endpoint} is not http://IP:PORT")))
}

impl EtcdCounters {
    pub fn scrape(address: SocketAddr) -> Result<EtcdCounters> {
        let (status, body) = get(address, "/metrics")?;
        if status != 200 {
            return Err(Error::Setup(format!("etcd /metrics answered {status}")));
        }
        let samples = Samples::parse(&body);
        let received = "grpc_server_msg_received_total";
        Ok(EtcdCounters {
            at: Instant::now(),
            requests: samples.sum(received, &[]),
            keepalives: samples.sum(received, &[("grpc_method", "LeaseKeepAlive")]),
            watch_messages: samples.sum("grpc_server_msg_sent_total", &[("grpc_method", "Watch")]),
        })
    }

    /// The requests other than keep-alives (which go on at their own pace whatever else
    /// happens).
    pub fn besides_keepalives(&self) -> f64 {
        self.requests - self.keepalives
    }
}
