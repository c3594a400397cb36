//! The load the agents put on etcd, from etcd's own counters ([`crate::measure::etcd`]):
//! the requests it received and the watch events it sent, with the moment of the scrape.

use std::time::Instant;

use super::{Error, Result};
use crate::measure::etcd::EtcdMetrics;

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

impl EtcdCounters {
    /// The counters of the member at `endpoint` (`http://IP:PORT`).
    pub fn scrape(endpoint: &str) -> Result<EtcdCounters> {
        let metrics = EtcdMetrics::scrape(endpoint)
            .ok_or_else(|| Error::Setup(format!("etcd at {endpoint} served no plain-http /metrics")))?;
        Ok(EtcdCounters {
            at: Instant::now(),
            requests: metrics.requests(None),
            keepalives: metrics.requests(Some("LeaseKeepAlive")),
            watch_messages: metrics.watch_messages(),
        })
    }

    /// The requests other than keep-alives (which go on at their own pace whatever else
    /// happens).
    pub fn besides_keepalives(&self) -> f64 {
        self.requests - self.keepalives
    }
}
