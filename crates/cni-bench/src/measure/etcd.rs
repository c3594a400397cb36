//! What a load asks of etcd, from its members' own `/metrics` on their client ports: the
//! gRPC messages each received (one per request: the HTTP gateway opens one gRPC call per
//! request, a keep-alive included), by method, the bytes they carried, and the messages
//! sent on watch streams.

use std::net::SocketAddr;

use cni_testkit::scrape::{get, Samples};

const RECEIVED: &str = "grpc_server_msg_received_total";

/// One scrape of one member's counters.
pub struct EtcdMetrics(Samples);

impl EtcdMetrics {
    /// The counters of the member serving `endpoint` (`http://IP:PORT`); None when it is
    /// not plain HTTP (a TLS cluster), is down, or answers with an error.
    pub fn scrape(endpoint: &str) -> Option<EtcdMetrics> {
        let (status, body) = get(client_address(endpoint)?, "/metrics").ok()?;
        (status == 200).then(|| EtcdMetrics(Samples::parse(&body)))
    }

    /// Requests received, all of them or those of one gRPC method (`Txn`, `LeaseKeepAlive`).
    pub fn requests(&self, method: Option<&str>) -> f64 {
        match method {
            Some(method) => self.0.sum(RECEIVED, &[("grpc_method", method)]),
            None => self.0.sum(RECEIVED, &[]),
        }
    }

    /// Bytes of the gRPC requests received.
    pub fn request_bytes(&self) -> f64 {
        self.0.sum("etcd_network_client_grpc_received_bytes_total", &[])
    }

    /// Messages sent on watch streams (events and progress notifications).
    pub fn watch_messages(&self) -> f64 {
        self.0.sum("grpc_server_msg_sent_total", &[("grpc_method", "Watch")])
    }
}

/// The client address of an `http://IP:PORT` endpoint.
pub fn client_address(endpoint: &str) -> Option<SocketAddr> {
    endpoint.strip_prefix("http://")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_endpoints_have_a_metrics_address() {
        assert_eq!(client_address("http://127.0.0.1:2379"), Some("127.0.0.1:2379".parse().unwrap()));
        assert_eq!(client_address("https://127.0.0.1:2379"), None);
        assert_eq!(client_address("http://etcd:2379"), None);
    }
}
