//! The lease daemon's metrics (`dhcp_daemon_*`), served with `-metrics-address`. Counting
//! is a few atomics per lease event, always on; the exposition code is linked into the
//! multicall binary but only ever runs in the daemon.
//!
//! DHCP servers and containers are untrusted: labels are the operation and the kind of
//! failure from closed sets, never a server's message, an address or a container ID.

use cni_metrics::prometheus_client::metrics::counter::Counter;
use cni_metrics::prometheus_client::metrics::family::Family;
use cni_metrics::prometheus_client::metrics::gauge::Gauge;
use cni_metrics::prometheus_client::registry::Registry;
use cni_metrics::{Label, Labels2};

use super::client::ClientError;

/// The prefix of every metric of the daemon.
pub const PREFIX: &str = "dhcp_daemon";

/// What the daemon was doing with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// DISCOVER/REQUEST: an ADD, or a lost lease asked for again.
    Acquire,
    /// Unicast REQUEST at T1.
    Renew,
    /// Broadcast REQUEST at T2.
    Rebind,
    Release,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Renew => "renew",
            Op::Rebind => "rebind",
            Op::Release => "release",
        }
    }
}

/// Why a lease operation failed, as a label.
pub fn reason(error: &ClientError) -> &'static str {
    match error {
        ClientError::Timeout(_) => "timeout",
        ClientError::Nak(_) => "nak",
        ClientError::Refused(_) => "refused",
        ClientError::Io(_) => "io",
        ClientError::Net(_) => "netns",
    }
}

#[derive(Default)]
pub struct DhcpMetrics {
    leases: Gauge,
    done: Family<Label, Counter>,
    failures: Family<Labels2, Counter>,
}

impl DhcpMetrics {
    /// Registers every metric in `registry` under [`PREFIX`].
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix(PREFIX);
        registry.register("leases", "Leases the daemon holds (any state)", self.leases.clone());
        registry.register(
            "lease_operations",
            "Leases acquired, renewed, rebound and released, by operation",
            self.done.clone(),
        );
        registry.register(
            "failures",
            "Failed lease operations, by operation and reason",
            self.failures.clone(),
        );
    }

    pub(super) fn held(&self, leases: usize) {
        self.leases.set(i64::try_from(leases).unwrap_or(i64::MAX));
    }

    pub(super) fn succeeded(&self, op: Op) {
        self.done.get_or_create(&[("op", op.label())]).inc();
    }

    pub(super) fn failed(&self, op: Op, reason: &'static str) {
        self.failures.get_or_create(&[("op", op.label()), ("reason", reason)]).inc();
    }
}
