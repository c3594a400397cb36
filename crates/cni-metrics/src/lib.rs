//! Health and Prometheus metrics for the workspace's long-running daemons (the etcd-ipam
//! agent, the overlay agent, the dhcp daemon, cni-dnsd): the metrics are kept in a
//! [`prometheus_client`] registry (the Prometheus project's crate, which writes the
//! exposition format), and [`http`] serves them with `/healthz` on an address of the
//! operator's choosing. Off unless a daemon is given an address.
//!
//! Each daemon defines its metrics in a module of its own, registers them in a [`Registry`]
//! with its prefix, and hands [`serve`] the registry with a health check. Updating a metric
//! is an atomic operation: the daemons' work never waits on a scrape.
//!
//! Label values are always from closed sets the daemon defines (an operation, a reason, a
//! record type), never from what a client, a peer or a server sent, so the number of
//! series is fixed whatever anyone does.
//!
//! The daemons' start-up around it (logging, the listening socket, the pid file, the
//! metrics endpoint and the line announcing it, plugin-or-daemon dispatch) is [`daemon`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use prometheus_client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub mod daemon;
pub mod http;

/// A metric family labelled by one label from a closed set (`Family<Label, M>`).
pub type Label = [(&'static str, &'static str); 1];
/// A family labelled by two labels from closed sets.
pub type Labels2 = [(&'static str, &'static str); 2];

/// What `/healthz` answers: `Ok` with a line of detail, or `Err` saying why not (503).
pub type HealthCheck = Box<dyn Fn() -> Result<String, String> + Send + Sync>;

struct Exposition {
    registry: Registry,
    health: HealthCheck,
}

impl http::Source for Exposition {
    fn metrics(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    fn health(&self) -> Result<String, String> {
        (self.health)()
    }
}

/// Serves `registry` on `/metrics` and `health` on `/healthz` at `address`, on one
/// background thread; returns the address bound (see [`http`] for the limits).
pub fn serve(address: SocketAddr, registry: Registry, health: HealthCheck) -> io::Result<SocketAddr> {
    http::serve(address, Arc::new(Exposition { registry, health }))
}

/// Parses a `--metrics-address` value: an IP address and port (`127.0.0.1:9xxx`,
/// `[::1]:9xxx`). Host names are refused: the address is bound, never resolved.
pub fn parse_address(value: &str) -> Result<SocketAddr, String> {
    value.parse().map_err(|_| format!("metrics address {value:?} is not IP:PORT (e.g. 127.0.0.1:9400)"))
}

/// Buckets for network round trips, 0.5 ms to ~8 s.
pub fn round_trip_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 15)
}

/// Whether a dependency (etcd) answered: the times of the last answered and the last failed
/// round trip, for `/healthz`.
pub struct Reachability {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last answer, plus one; 0: never.
    last_ok: AtomicU64,
    /// Which came last: each round trip takes the next number of `sequence`; 0: never.
    last_ok_seq: AtomicU64,
    last_failed_seq: AtomicU64,
    sequence: AtomicU64,
}

impl Default for Reachability {
    fn default() -> Reachability {
        Reachability {
            epoch: Instant::now(),
            last_ok: AtomicU64::new(0),
            last_ok_seq: AtomicU64::new(0),
            last_failed_seq: AtomicU64::new(0),
            sequence: AtomicU64::new(0),
        }
    }
}

impl Reachability {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// A round trip ended: answered (`true`) or not.
    pub fn record(&self, answered: bool) {
        let seq = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        if answered {
            self.last_ok.store(self.now(), Ordering::Relaxed);
            self.last_ok_seq.fetch_max(seq, Ordering::Relaxed);
        } else {
            self.last_failed_seq.fetch_max(seq, Ordering::Relaxed);
        }
    }

    /// Healthy when the latest round trip was answered, or none was made yet; with
    /// `max_age`, also only while the last answer is at most that old (for a daemon that
    /// talks to the dependency all the time, so silence means trouble).
    pub fn check(&self, what: &str, max_age: Option<Duration>) -> Result<String, String> {
        let ok = self.last_ok.load(Ordering::Relaxed);
        let ago = |t: u64| Duration::from_millis(self.now().saturating_sub(t));
        if self.last_failed_seq.load(Ordering::Relaxed) > self.last_ok_seq.load(Ordering::Relaxed) {
            return Err(match ok {
                0 => format!("{what} unreachable (never answered)"),
                _ => format!("{what} unreachable (last answered {:.1?} ago)", ago(ok)),
            });
        }
        match (ok, max_age) {
            (0, None) => Ok(format!("no {what} round trip yet")),
            (0, Some(_)) => Err(format!("{what} not reached yet")),
            (ok, Some(max)) if ago(ok) > max => {
                Err(format!("{what} last answered {:.1?} ago (more than {max:?})", ago(ok)))
            }
            (ok, _) => Ok(format!("{what} answered {:.1?} ago", ago(ok))),
        }
    }
}

/// The round trips to a dependency: a latency histogram, a counter of the unanswered ones,
/// and the [`Reachability`] `/healthz` looks at.
pub struct RoundTrips {
    pub latency: Histogram,
    pub failed: Counter,
    pub reachability: Reachability,
}

impl Default for RoundTrips {
    fn default() -> RoundTrips {
        RoundTrips {
            latency: Histogram::new(round_trip_buckets()),
            failed: Counter::default(),
            reachability: Reachability::default(),
        }
    }
}

impl RoundTrips {
    /// One round trip of `elapsed`, answered or not (answered: the server replied, even
    /// with an error of its own).
    pub fn record(&self, elapsed: Duration, answered: bool) {
        self.latency.observe(elapsed.as_secs_f64());
        if !answered {
            self.failed.inc();
        }
        self.reachability.record(answered);
    }

    /// Registers `<what>_request_duration_seconds` and `<what>_requests_failed_total`.
    pub fn register(&self, registry: &mut Registry, what: &str) {
        registry.register(
            format!("{what}_request_duration_seconds"),
            format!("Time of one {what} round trip (answered or not)"),
            self.latency.clone(),
        );
        registry.register(
            format!("{what}_requests_failed"),
            format!("{what} round trips that got no answer"),
            self.failed.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachability_follows_the_latest_round_trip() {
        let r = Reachability::default();
        assert!(r.check("etcd", None).is_ok(), "nothing tried yet is not a failure");
        assert!(r.check("etcd", Some(Duration::from_secs(60))).is_err(), "a daemon that must talk has not");
        r.record(true);
        assert!(r.check("etcd", Some(Duration::from_secs(60))).is_ok());
        r.record(false);
        let why = r.check("etcd", None).unwrap_err();
        assert!(why.contains("etcd unreachable"), "{why}");
        r.record(true);
        assert!(r.check("etcd", None).is_ok());
        std::thread::sleep(Duration::from_millis(2));
        assert!(r.check("etcd", Some(Duration::ZERO)).is_err(), "an answer older than the limit is stale");
    }

    #[test]
    fn addresses_are_ip_and_port_only() {
        assert_eq!(parse_address("127.0.0.1:9400").unwrap().port(), 9400);
        assert!(parse_address("[::1]:9400").is_ok());
        for bad in ["localhost:9400", "127.0.0.1", ":9400", "127.0.0.1:99999", ""] {
            assert!(parse_address(bad).unwrap_err().contains("IP:PORT"), "{bad}");
        }
    }
}
