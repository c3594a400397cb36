//! The node agent's metrics (`etcd_ipam_agent_*`), served when the agent is started with
//! `--metrics-address`: what an operator graphs about a node's address allocation. The
//! counters are always kept (a few atomics per request); only serving them is optional.
//!
//! Labels come from closed sets defined here (the verb, the error's kind, the refusal's
//! kind), never from a request: no container ID, handle or network name becomes a label.

use std::sync::Arc;

use cni_etcd::Observer;
use cni_metrics::prometheus_client::metrics::counter::Counter;
use cni_metrics::prometheus_client::metrics::family::Family;
use cni_metrics::prometheus_client::metrics::gauge::Gauge;
use cni_metrics::prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use cni_metrics::prometheus_client::registry::Registry;
use cni_metrics::{Label, Labels2, RoundTrips};
use cni_os::socket::Refusal;

use super::error::EtcdIpamError;

/// The prefix of every metric of the agent.
pub const PREFIX: &str = "etcd_ipam_agent";

pub struct AgentMetrics {
    allocations: Counter,
    releases: Counter,
    failures: Family<Labels2, Counter>,
    refused: Family<Label, Counter>,
    batch_size: Histogram,
    cached_networks: Gauge,
    /// Every etcd call of every cached allocator; `/healthz` looks at its reachability.
    pub etcd: Arc<RoundTrips>,
}

impl Default for AgentMetrics {
    fn default() -> AgentMetrics {
        AgentMetrics {
            allocations: Counter::default(),
            releases: Counter::default(),
            failures: Family::default(),
            refused: Family::default(),
            // 1 to 128 ADDs in one transaction.
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 8)),
            cached_networks: Gauge::default(),
            etcd: Arc::default(),
        }
    }
}

/// The verb of a request as a label: the two the agent serves, or `other`.
pub fn op_label(op: Option<&str>) -> &'static str {
    match op {
        Some("add") => "add",
        Some("del") => "del",
        _ => "other",
    }
}

/// The kind of an error as a label.
fn reason(error: &EtcdIpamError) -> &'static str {
    match error {
        EtcdIpamError::InvalidConfig(_) => "invalid_config",
        EtcdIpamError::Decode(_) => "decode",
        EtcdIpamError::Unavailable(_) => "etcd_unavailable",
        EtcdIpamError::Exhausted { .. } => "exhausted",
        EtcdIpamError::Contended(_) => "contended",
        EtcdIpamError::Store(_) => "store",
        EtcdIpamError::CheckFailed(_) => "check_failed",
        EtcdIpamError::FromAgent { .. } => "agent",
    }
}

impl AgentMetrics {
    /// Registers every metric in `registry` under [`PREFIX`].
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix(PREFIX);
        registry.register("allocations", "Addresses handed out (ADDs answered)", self.allocations.clone());
        registry.register(
            "releases",
            "DELs answered (an address released or none held)",
            self.releases.clone(),
        );
        registry.register(
            "failures",
            "Requests answered with an error, by verb and reason",
            self.failures.clone(),
        );
        registry.register(
            "requests_refused",
            "Connections refused before a request was read, by reason",
            self.refused.clone(),
        );
        registry.register("batch_size", "ADDs combined into one etcd transaction", self.batch_size.clone());
        registry.register(
            "cached_networks",
            "Network configurations with a cached etcd client and block",
            self.cached_networks.clone(),
        );
        self.etcd.register(registry, "etcd");
    }

    /// What an allocator's etcd client reports its calls to.
    pub fn observer(&self) -> Observer {
        let etcd = self.etcd.clone();
        Arc::new(move |elapsed, answered| etcd.record(elapsed, answered))
    }

    pub(super) fn allocated(&self) {
        self.allocations.inc();
    }

    pub(super) fn released(&self) {
        self.releases.inc();
    }

    pub(super) fn failed(&self, op: &'static str, error: &EtcdIpamError) {
        self.failures.get_or_create(&[("op", op), ("reason", reason(error))]).inc();
    }

    pub(super) fn refused(&self, why: &Refusal) {
        let reason = match why {
            Refusal::NotRoot { .. } => "not_root",
            Refusal::TooLarge { .. } => "too_large",
            Refusal::Deadline { .. } => "deadline",
            Refusal::Io(_) => "io",
        };
        self.refused.get_or_create(&[("reason", reason)]).inc();
    }

    pub(super) fn batch(&self, size: usize) {
        self.batch_size.observe(size as f64);
    }

    pub(super) fn cached(&self, networks: usize) {
        self.cached_networks.set(i64::try_from(networks).unwrap_or(i64::MAX));
    }
}
