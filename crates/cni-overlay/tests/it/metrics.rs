//! The overlay agent's `/metrics` and `/healthz` scraped over TCP while it works: two hosts
//! (namespaces on an underlay bridge) on a real etcd, a peer appearing and going, a hostile
//! record refused, then etcd stopped and `/healthz` turning 503. Needs root and Debian's
//! etcd-server. Names carry `mx`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::harness::{wait_for, Cluster, PREFIX, TTL};
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::scrape::{self, Samples};

fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples.get(&format!("cni_overlay_agent_{name}"), labels).unwrap_or(0.0)
}

/// Scrapes until `done` holds for the samples (the agent works asynchronously), at most
/// `limit`; the last scrape either way.
fn scrape_until(address: SocketAddr, limit: Duration, done: impl Fn(&Samples) -> bool) -> Samples {
    wait_for(limit, || Some(Samples::scrape(address)).filter(&done))
        .unwrap_or_else(|| Samples::scrape(address))
}

#[test]
fn peers_refusals_and_etcd_health_are_scraped() {
    let mut cluster = Cluster::start("mx", EtcdCluster::start("mxo", 1), 2);
    let endpoints = cluster.etcd.endpoints();
    cluster.hosts[0].start_agent(&endpoints, &["--metrics-address", "127.0.0.1:0"]);
    let address = scrape::address_in_log(&cluster.hosts[0].dir.join("agent.log"));
    cluster.hosts[1].start_agent(&endpoints, &[]);
    assert!(cluster.wait_peers(0, &[1], Duration::from_secs(10)), "{}", cluster.logs());

    // A record on no lease: refused, and counted under its rule, not its key.
    let hostile = format!("{PREFIX}/subnets/10.244.250.0-24");
    let value = br#"{"node":"mx-evil","underlay":"192.168.91.66","vtepMac":"02:00:00:00:00:01"}"#;
    cluster.etcd.client().put(hostile.as_bytes(), value, 0).unwrap();
    let refused = |s: &Samples| sample(s, "records_refused_total", &[("reason", "no_lease")]) == 1.0;
    let samples = scrape_until(address, Duration::from_secs(10), refused);
    assert!(refused(&samples), "{samples}\n{}", cluster.logs());
    assert_eq!(sample(&samples, "peers", &[("kind", "vxlan")]), 1.0, "{samples}");
    assert_eq!(sample(&samples, "peer_changes_total", &[("change", "joined")]), 1.0, "{samples}");
    assert_eq!(sample(&samples, "programming_failures", &[]), 0.0);
    assert!(sample(&samples, "etcd_request_duration_seconds_count", &[]) >= 2.0, "{samples}");
    assert_eq!(sample(&samples, "etcd_requests_failed_total", &[]), 0.0);
    assert!(!samples.to_string().contains("mx-evil") && !samples.to_string().contains("10.244.250"));
    let (status, body) = scrape::get(address, "/healthz").unwrap();
    assert_eq!(status, 200, "{body}");

    // The peer's agent dies: its lease runs out and the peer leaves.
    cluster.hosts[1].kill_agent();
    // (The change is counted before the kernel is reprogrammed and the gauge set.)
    let left = |s: &Samples| {
        sample(s, "peer_changes_total", &[("change", "left")]) == 1.0
            && sample(s, "peers", &[("kind", "vxlan")]) == 0.0
    };
    let samples = scrape_until(address, Duration::from_secs(4 * TTL), left);
    assert!(left(&samples), "{samples}\n{}", cluster.logs());

    // etcd stops: within a TTL without an answer the agent reports itself unhealthy.
    cluster.etcd.kill(0);
    let unhealthy = wait_for(Duration::from_secs(6 * TTL), || {
        let (status, body) = scrape::get(address, "/healthz").ok()?;
        (status == 503).then_some(body)
    });
    let body = unhealthy.unwrap_or_else(|| panic!("/healthz stayed 200 with etcd gone\n{}", cluster.logs()));
    assert!(body.contains("etcd"), "{body}");
    assert!(sample(&Samples::scrape(address), "etcd_requests_failed_total", &[]) >= 1.0);
}
