//! The agent's metrics (`cni_overlay_agent_*`) and `/healthz`, served when it is started
//! with `--metrics-address`. The counters are always kept (atomics); only serving is
//! optional.
//!
//! Peers' records are untrusted, so nothing from them becomes a label: a refused record is
//! counted under the rule it broke ([`crate::peer::Rule`], a closed set), never under its key
//! or node name.

use std::sync::Arc;
use std::time::Duration;

use cni_etcd::Observer;
use cni_metrics::prometheus_client::metrics::counter::Counter;
use cni_metrics::prometheus_client::metrics::family::Family;
use cni_metrics::prometheus_client::metrics::gauge::Gauge;
use cni_metrics::prometheus_client::registry::Registry;
use cni_metrics::{Label, RoundTrips};

use crate::peer::{Change, PeerPath, PeerRecord};

/// The prefix of every metric of the agent.
pub const PREFIX: &str = "cni_overlay_agent";

#[derive(Default)]
pub struct OverlayMetrics {
    peers: Family<Label, Gauge>,
    peer_changes: Family<Label, Counter>,
    records_refused: Family<Label, Counter>,
    programming_failures: Gauge,
    reconcile_errors: Counter,
    watch_restarts: Counter,
    lease_reacquired: Counter,
    /// Every unary etcd call (lease keep-alive, listings); `/healthz` looks at it.
    pub etcd: Arc<RoundTrips>,
}

impl OverlayMetrics {
    /// Registers every metric in `registry` under [`PREFIX`].
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix(PREFIX);
        registry.register("peers", "Peers whose entries this node programs, by kind", self.peers.clone());
        registry.register(
            "peer_changes",
            "Peers joined or left, as seen by this node",
            self.peer_changes.clone(),
        );
        registry.register(
            "records_refused",
            "Peer records refused, by the rule they broke (each change of a record once)",
            self.records_refused.clone(),
        );
        registry.register(
            "programming_failures",
            "Kernel requests for peers' entries failing now (retried)",
            self.programming_failures.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Passes over the peers with a kernel request refused, or a dump that failed",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "watch_restarts",
            "Resyncs of the peers from a full listing after the watch was lost",
            self.watch_restarts.clone(),
        );
        registry.register(
            "lease_reacquired",
            "Times the node's subnet lease had expired and was acquired again",
            self.lease_reacquired.clone(),
        );
        self.etcd.register(registry, "etcd");
    }

    /// What `/healthz` answers: 200 while etcd answered within `ttl` (the lease is renewed
    /// three times per TTL, so a whole TTL of silence means the node's record is about to
    /// expire), 503 otherwise.
    pub fn health(&self, ttl: Duration) -> impl Fn() -> Result<String, String> + Send + Sync + 'static {
        let etcd = self.etcd.clone();
        move || etcd.reachability.check("etcd", Some(ttl))
    }

    /// What the agent's etcd client reports its calls to.
    pub fn observer(&self) -> Observer {
        let etcd = self.etcd.clone();
        Arc::new(move |elapsed, answered| etcd.record(elapsed, answered))
    }

    pub(crate) fn change(&self, change: &Change) {
        let label = |change: &'static str| [("change", change)];
        match change {
            Change::Joined(_) | Change::Replaced { .. } => {
                self.peer_changes.get_or_create(&label("joined")).inc()
            }
            Change::Left(_) => self.peer_changes.get_or_create(&label("left")).inc(),
            Change::Refused { reason, .. } => {
                self.records_refused.get_or_create(&[("reason", reason.rule.label())]).inc()
            }
            Change::Unchanged => 0,
        };
    }

    /// A pass over the peers ended with `peers` believed and `failures` requests refused
    /// (`None`: the pass itself failed). `peers{kind}` counts them by the path the data
    /// plane takes to each (`direct` or `vxlan`).
    pub(crate) fn reconciled<'a>(
        &self,
        peers: impl Iterator<Item = &'a PeerRecord>,
        failures: Option<usize>,
    ) {
        let (mut direct, mut vxlan, mut wireguard) = (0i64, 0i64, 0i64);
        for peer in peers {
            match peer.path() {
                PeerPath::Direct => direct += 1,
                PeerPath::Vxlan => vxlan += 1,
                PeerPath::Wireguard => wireguard += 1,
            }
        }
        self.peers.get_or_create(&[("kind", "direct")]).set(direct);
        self.peers.get_or_create(&[("kind", "vxlan")]).set(vxlan);
        self.peers.get_or_create(&[("kind", "wireguard")]).set(wireguard);
        if failures != Some(0) {
            self.reconcile_errors.inc();
        }
        if let Some(failures) = failures {
            self.programming_failures.set(i64::try_from(failures).unwrap_or(i64::MAX));
        }
    }

    pub(crate) fn watch_restarted(&self) {
        self.watch_restarts.inc();
    }

    pub(crate) fn lease_expired(&self) {
        self.lease_reacquired.inc();
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::peer::{Own, PeerRecord, Rule};

    /// Each check of `PeerRecord::parse` refuses under its own rule, so its own label.
    #[test]
    fn every_refusal_has_its_reason() {
        let args: Vec<String> = ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let config = Config::parse(&args).unwrap();
        let own = Own {
            subnet: "10.244.1.0/24".parse().unwrap(),
            subnet6: None,
            underlay: "192.0.2.1".parse().unwrap(),
            onlink: vec!["192.0.2.0/24".parse().unwrap()],
            wg_public_key: Some([9; 32]),
        };
        let key = |subnet: &str| format!("{}{subnet}", config.subnets_prefix()).into_bytes();
        let good_mac =
            crate::dataplane::vtep_mac("192.0.2.9".parse::<std::net::IpAddr>().unwrap()).to_string();
        let value = |node: &str, underlay: &str, mac: &str| {
            format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}"}}"#).into_bytes()
        };
        let cases: Vec<(Vec<u8>, Vec<u8>, i64, Rule)> = vec![
            (b"/elsewhere/x".to_vec(), value("b", "192.0.2.9", &good_mac), 1, Rule::Key),
            (key("10.250.0.0-24"), value("b", "192.0.2.9", &good_mac), 1, Rule::Subnet),
            (key("10.244.2.1-24"), value("b", "192.0.2.9", &good_mac), 1, Rule::Subnet),
            (key("10.244.2.0-24"), value("b", "192.0.2.9", &good_mac), 0, Rule::NoLease),
            (key("10.244.2.0-24"), vec![b' '; 100_000], 1, Rule::TooLarge),
            (key("10.244.2.0-24"), b"{".to_vec(), 1, Rule::Malformed),
            (key("10.244.2.0-24"), value("", "192.0.2.9", &good_mac), 1, Rule::NodeName),
            (key("10.244.2.0-24"), value("n1", "192.0.2.9", &good_mac), 1, Rule::OwnNode),
            (key("10.244.2.0-24"), value("b", "239.1.1.1", &good_mac), 1, Rule::Underlay),
            (key("10.244.2.0-24"), value("b", "192.0.2.9", "02:00:00:00:00:01"), 1, Rule::VtepMac),
        ];
        for (key, value, lease, reason) in cases {
            let refusal = PeerRecord::parse(&config, &own, &key, &value, lease).unwrap_err();
            assert_eq!(refusal.rule, reason, "{refusal}");
        }
        let wg_args: Vec<String> =
            args.iter().cloned().chain(["--backend".into(), "wireguard".into()]).collect();
        let wg_config = Config::parse(&wg_args).unwrap();
        let wg_value = |key: &str, port: u32| {
            format!(
                r#"{{"node":"b","underlay":"192.0.2.9","vtepMac":"{good_mac}","wgPublicKey":"{key}","wgPort":{port}}}"#
            )
            .into_bytes()
        };
        let own_key = cni_net::wireguard::base64(&[9; 32]);
        let other_key = cni_net::wireguard::base64(&[8; 32]);
        for (value, reason) in [
            (wg_value("AAAA", 51820), Rule::WgPublicKey),
            (wg_value(&own_key, 51820), Rule::WgPublicKey),
            (wg_value(&other_key, 0), Rule::WgPort),
            (wg_value(&other_key, 70000), Rule::Malformed),
            (value("b", "192.0.2.9", &good_mac), Rule::WgPublicKey),
        ] {
            let refusal = PeerRecord::parse(&wg_config, &own, &key("10.244.2.0-24"), &value, 1).unwrap_err();
            assert_eq!(refusal.rule, reason, "{refusal}");
        }
    }
}
