//! The dhcp daemon's `/metrics` and `/healthz` scraped over TCP while it keeps a real
//! lease: kea with short leases in a server namespace, a container attached by the bridge
//! plugin with dhcp IPAM, the lease acquired and renewed, then the server killed until
//! the lease is lost and `/healthz` turns 503; a flood of idle metrics clients meanwhile
//! stops nothing. Needs root and kea-dhcp4-server. Names carry `mxd`.

use crate::common;
use crate::support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cni_testkit::ns::TestNetns;
use cni_testkit::poll::EVENTUALLY;
use cni_testkit::scrape::{self, Samples};
use common::call;
use support::{wait_for, Network};

const PREFIX: &str = "mxd";

fn scrape_in(net: &Network, address: SocketAddr) -> Samples {
    net.host.run(move || Samples::scrape(address)).unwrap()
}

fn health(net: &Network, address: SocketAddr) -> (u16, String) {
    net.host.run(move || scrape::get(address, "/healthz").unwrap()).unwrap()
}

fn operations(samples: &Samples, op: &str) -> f64 {
    samples.get("dhcp_daemon_lease_operations_total", &[("op", op)]).unwrap_or(0.0)
}

#[test]
fn a_lease_acquired_renewed_and_lost_is_scraped() {
    let net = Network::new(PREFIX);
    let mut server = net.kea(6, 2, 4);
    let _daemon = net.daemon_with(&["-metrics-address", "127.0.0.1:0"]);
    let address = scrape::address_in_log(&net.path("daemon.log"));
    let container = TestNetns::with_prefix(PREFIX).unwrap();

    // Idle clients holding the metrics endpoint's threads and queue: the ADD goes on.
    let idle = net
        .host
        .run(move || {
            let mut idle: Vec<TcpStream> = (0..32).filter_map(|_| TcpStream::connect(address).ok()).collect();
            for client in &mut idle {
                let _ = client.write_all(b"GET /metr");
            }
            idle
        })
        .unwrap();
    let add = call("bridge", "ADD", &net.host, Some(&container), &net.conf()).run();
    assert!(add.success(), "ADD: {}\n{}", add.stdout, net.log("daemon.log"));
    drop(idle);

    // The endpoint closes new connections at once while the idle ones still fill its
    // queue: the first scrapes after they go may be refused (as a flood's are).
    let samples = net.host.run(move || Samples::scrape_once_served(address, EVENTUALLY)).unwrap();
    assert_eq!(samples.value("dhcp_daemon_leases", &[]), 1.0, "{samples}");
    assert_eq!(operations(&samples, "acquire"), 1.0, "{samples}");
    let (status, body) = health(&net, address);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("1 leases held"), "{body}");

    // T1 is 2 s: the daemon renews.
    let renewed = || operations(&scrape_in(&net, address), "renew") >= 1.0;
    wait_for("a renewal counted", Duration::from_secs(15), renewed);

    // The server goes: renewals and rebinds time out, the lease expires, health fails.
    server.kill();
    wait_for("/healthz 503", Duration::from_secs(30), || health(&net, address).0 == 503);
    let (_, body) = health(&net, address);
    assert!(body.contains("1 of 1 leases lost"), "{body}");
    let samples = scrape_in(&net, address);
    let timeouts = ["renew", "rebind", "acquire"]
        .iter()
        .map(|op| {
            samples.get("dhcp_daemon_failures_total", &[("op", op), ("reason", "timeout")]).unwrap_or(0.0)
        })
        .sum::<f64>();
    assert!(timeouts >= 1.0, "{samples}\n{}", net.log("daemon.log"));
    assert!(!samples.to_string().contains(PREFIX), "a container ID became a label: {samples}");

    // DEL forgets it.
    assert!(call("bridge", "DEL", &net.host, Some(&container), &net.conf()).run().success());
    let samples = scrape_in(&net, address);
    assert_eq!(samples.value("dhcp_daemon_leases", &[]), 0.0, "{samples}");
    assert_eq!(health(&net, address).0, 200);
}
