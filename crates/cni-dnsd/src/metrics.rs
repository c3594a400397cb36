//! The resolver's metrics (`cni_dnsd_*`), served when it is started with
//! `--metrics-address`. Counting is a few atomics per query, always on.
//!
//! Queries come from containers, so nothing of a query becomes a label but its record type
//! mapped to a closed set ([`query_type`]); names, addresses and networks never do.

use std::sync::OnceLock;
use std::time::Duration;

use cni_metrics::prometheus_client::metrics::counter::Counter;
use cni_metrics::prometheus_client::metrics::family::Family;
use cni_metrics::prometheus_client::metrics::gauge::Gauge;
use cni_metrics::prometheus_client::metrics::histogram::Histogram;
use cni_metrics::prometheus_client::registry::Registry;
use cni_metrics::Labels2;

/// The prefix of every metric of the resolver.
pub const PREFIX: &str = "cni_dnsd";

/// Who answered a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The resolver, from its records.
    Local,
    /// An upstream server (or the resolver on its behalf: SERVFAIL when none answered or
    /// every forwarding slot was busy).
    Upstream,
}

/// The `type` label's values; the last is `other`.
const TYPES: [&str; 11] = ["A", "AAAA", "PTR", "SRV", "CNAME", "TXT", "MX", "NS", "SOA", "ANY", "other"];
/// The `result` label's values.
const RESULTS: [&str; 6] = ["answered", "nxdomain", "error", "forwarded", "forward_failed", "dropped"];

pub struct DnsMetrics {
    queries: Family<Labels2, Counter>,
    /// Each (type, result) series once the family made it: counting a query is then one
    /// atomic add, not the family's lock and a hash of its labels.
    series: [[OnceLock<Counter>; RESULTS.len()]; TYPES.len()],
    upstream_latency: Histogram,
    busy: Counter,
    refused: Family<Labels2, Counter>,
    names: Gauge,
    networks: Gauge,
}

impl Default for DnsMetrics {
    fn default() -> DnsMetrics {
        DnsMetrics {
            queries: Family::default(),
            series: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            upstream_latency: Histogram::new(cni_metrics::round_trip_buckets()),
            busy: Counter::default(),
            refused: Family::default(),
            names: Gauge::default(),
            networks: Gauge::default(),
        }
    }
}

/// The record type asked for in a query's first question, as a label; `other` for the
/// rest and for a query too short to have one.
pub fn query_type(query: &[u8]) -> &'static str {
    TYPES[type_index(query)]
}

/// [`query_type`] as an index into [`TYPES`].
fn type_index(query: &[u8]) -> usize {
    // After the 12-byte header: the name as length-prefixed labels ending with 0, then the
    // type (a compressed name is not expected in a question; it ends the name too).
    let mut at = 12;
    while let Some(&len) = query.get(at) {
        at += 1;
        match len {
            0 => break,
            l if l & 0xc0 != 0 => {
                at += 1;
                break;
            }
            l => at += usize::from(l),
        }
    }
    let other = TYPES.len() - 1;
    let Some(code) = query.get(at..at + 2) else { return other };
    match u16::from_be_bytes([code[0], code[1]]) {
        1 => 0,
        28 => 1,
        12 => 2,
        33 => 3,
        5 => 4,
        16 => 5,
        15 => 6,
        2 => 7,
        6 => 8,
        255 => 9,
        _ => other,
    }
}

/// The outcome of a query, from the reply's response code (`dropped`: no reply).
#[cfg(test)]
fn result(source: Source, reply: Option<&[u8]>) -> &'static str {
    RESULTS[result_index(source, reply)]
}

/// The result as an index into [`RESULTS`].
fn result_index(source: Source, reply: Option<&[u8]>) -> usize {
    let Some(reply) = reply else { return 5 };
    let rcode = reply.get(3).map(|b| b & 0x0f);
    match (source, rcode) {
        (Source::Local, Some(0)) => 0,
        (Source::Local, Some(3)) => 1,
        (Source::Local, _) => 2,
        (Source::Upstream, Some(0 | 3)) => 3,
        (Source::Upstream, _) => 4,
    }
}

impl DnsMetrics {
    /// Registers every metric in `registry` under [`PREFIX`].
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix(PREFIX);
        registry.register(
            "queries",
            "Queries by record type and result (answered, nxdomain, error: from the records; \
             forwarded, forward_failed: upstream; dropped: not answered)",
            self.queries.clone(),
        );
        registry.register(
            "upstream_request_duration_seconds",
            "Time of one forwarded query, until the upstream answered or every server failed",
            self.upstream_latency.clone(),
        );
        registry.register(
            "busy_refusals",
            "Queries answered SERVFAIL and TCP clients closed because every slot was in use",
            self.busy.clone(),
        );
        registry.register(
            "refused",
            "Queries (udp) and clients (tcp) not answered, silently, because they were not the \
             network's: reason source (not from its subnets) or interface (not from its bridge)",
            self.refused.clone(),
        );
        registry.register("names", "Attachments whose names are served", self.names.clone());
        registry.register("networks", "Networks served", self.networks.clone());
    }

    /// One query and its reply (`None`: none was sent).
    pub fn query(&self, query: &[u8], source: Source, reply: Option<&[u8]>) {
        let (kind, result) = (type_index(query), result_index(source, reply));
        self.series[kind][result]
            .get_or_init(|| {
                self.queries.get_or_create(&[("type", TYPES[kind]), ("result", RESULTS[result])]).clone()
            })
            .inc();
    }

    pub fn forwarded(&self, elapsed: Duration) {
        self.upstream_latency.observe(elapsed.as_secs_f64());
    }

    pub fn refused(&self, transport: crate::answer::Transport, why: crate::zone::Refusal) {
        let transport = match transport {
            crate::answer::Transport::Udp => "udp",
            crate::answer::Transport::Tcp => "tcp",
        };
        self.refused.get_or_create(&[("transport", transport), ("reason", why.label())]).inc();
    }

    pub fn busy(&self) {
        self.busy.inc();
    }

    /// After a reload: what is served now.
    pub fn loaded(&self, networks: usize, names: usize) {
        self.networks.set(i64::try_from(networks).unwrap_or(i64::MAX));
        self.names.set(i64::try_from(names).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Message;
    use hickory_proto::rr::{Name, RecordType};

    fn encoded(name: &str, qtype: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.add_query(hickory_proto::op::Query::query(Name::from_ascii(name).unwrap(), qtype));
        m.to_vec().unwrap()
    }

    #[test]
    fn the_type_label_is_from_a_closed_set_whatever_the_query() {
        assert_eq!(query_type(&encoded("a.dns.podman.", RecordType::A)), "A");
        assert_eq!(query_type(&encoded(".", RecordType::AAAA)), "AAAA");
        assert_eq!(query_type(&encoded("1.0.89.10.in-addr.arpa.", RecordType::PTR)), "PTR");
        assert_eq!(query_type(&encoded("x.", RecordType::CAA)), "other");
        // Garbage: short, a label running past the end, no question at all.
        for bytes in [&b""[..], &[0; 12], &[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 63, b'a'], &[0xff; 600]] {
            assert!(["other", "A", "AAAA", "PTR", "SRV", "CNAME", "TXT", "MX", "NS", "SOA", "ANY"]
                .contains(&query_type(bytes)));
        }
        assert_eq!(query_type(&[0; 12]), "other");
    }

    #[test]
    fn results_follow_the_reply_code() {
        let reply = |rcode: u8| vec![0, 0, 0x81, rcode];
        assert_eq!(result(Source::Local, Some(&reply(0))), "answered");
        assert_eq!(result(Source::Local, Some(&reply(3))), "nxdomain");
        assert_eq!(result(Source::Local, Some(&reply(5))), "error");
        assert_eq!(result(Source::Upstream, Some(&reply(3))), "forwarded");
        assert_eq!(result(Source::Upstream, Some(&reply(2))), "forward_failed");
        assert_eq!(result(Source::Local, None), "dropped");
    }
}
