//! What the ADDs ask of etcd, from its members' own `/metrics` (on their client ports):
//! the gRPC requests they received by method (the HTTP gateway the agents use makes one
//! per request) and the bytes those requests carried, summed over the members.

use cni_bench::measure::etcd::EtcdMetrics;

/// The methods an ADD may cost; anything else is counted under "other".
const METHODS: [&str; 5] = ["Txn", "Range", "Put", "DeleteRange", "LeaseKeepAlive"];

/// One scrape of every member's counters.
pub struct EtcdLoad {
    /// Requests received per method of [`METHODS`], then all others.
    requests: [f64; METHODS.len() + 1],
    /// Bytes of gRPC requests received.
    bytes: f64,
}

impl EtcdLoad {
    /// None when a member does not serve its metrics in plain HTTP (a TLS cluster) or is
    /// down: a sum missing a member would be wrong, so nothing is reported.
    pub fn scrape(endpoints: &[String]) -> Option<EtcdLoad> {
        let mut load = EtcdLoad { requests: [0.0; METHODS.len() + 1], bytes: 0.0 };
        for endpoint in endpoints {
            let member = EtcdMetrics::scrape(endpoint)?;
            let mut named = 0.0;
            for (i, method) in METHODS.iter().enumerate() {
                let count = member.requests(Some(method));
                load.requests[i] += count;
                named += count;
            }
            load.requests[METHODS.len()] += member.requests(None) - named;
            load.bytes += member.request_bytes();
        }
        Some(load)
    }

    /// The requests and bytes between `self` and `later`, per ADD.
    pub fn per_add(&self, later: &EtcdLoad, adds: usize) -> String {
        let adds = adds.max(1) as f64;
        let names = METHODS.iter().copied().chain(["other"]);
        let requests: Vec<String> = names
            .zip(self.requests.iter().zip(&later.requests))
            .map(|(name, (before, after))| (name, (after - before) / adds))
            .filter(|(_, per_add)| *per_add > 0.0)
            .map(|(name, per_add)| format!("{name} {per_add:.2}"))
            .collect();
        let total: f64 = later.requests.iter().sum::<f64>() - self.requests.iter().sum::<f64>();
        let bytes = later.bytes - self.bytes;
        format!(
            "etcd requests per ADD: {} ({}); {:.0} request bytes per ADD, {:.0} per request",
            format_args!("{:.2}", total / adds),
            requests.join(", "),
            bytes / adds,
            bytes / total.max(1.0),
        )
    }
}
