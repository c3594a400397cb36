//! podman 4.3's CNI backend on the plugin directory under test (see the crate docs).
//! Needs root, podman, crun and busybox-static; fails loudly without them.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cni_e2e::image::INDEX_BODY;
use cni_e2e::net_text::{http_get, single_ipv4};
use cni_e2e::oracle::HostSnapshot;
use cni_e2e::podman::{Podman, DEFAULT_NETWORK};

#[test]
fn run_rm_on_the_default_bridge_gets_an_address_in_its_subnet() {
    let podman = Podman::set_up();
    let (subnet, _gateway) = podman.network_subnet(DEFAULT_NETWORK);
    let mut timings = Vec::new();
    for _ in 0..3 {
        let (out, took) = podman.timed_run_rm(&[], &["ip", "-o", "-4", "addr", "show", "eth0"]);
        let eth0 = single_ipv4(&out);
        assert!(subnet.contains(eth0.addr), "eth0 has {eth0:?}, outside {subnet:?}");
        assert_eq!(eth0.prefix, subnet.prefix, "eth0's prefix differs from the network's");
        timings.push(took);
    }
    timings.sort();
    eprintln!(
        "cni-e2e [{}]: podman run --rm took {:?} (median of {:?})",
        podman.plugins_label(),
        timings[1],
        timings
    );
    assert!(podman.allocations(DEFAULT_NETWORK).is_empty(), "run --rm left addresses allocated");
}

#[test]
fn two_containers_ping_each_other() {
    let podman = Podman::set_up();
    podman.start("cne-ping-a", &[], &["sleep", "600"]);
    podman.start("cne-ping-b", &[], &["sleep", "600"]);
    let a = podman.eth0_ipv4("cne-ping-a").addr.to_string();
    let b = podman.eth0_ipv4("cne-ping-b").addr.to_string();
    assert_ne!(a, b, "both containers got the same address");
    podman.ok(&["exec", "cne-ping-a", "ping", "-c", "1", "-W", "3", &b]);
    podman.ok(&["exec", "cne-ping-b", "ping", "-c", "1", "-W", "3", &a]);
}

#[test]
fn published_port_reaches_httpd_from_host_gateway_and_hairpin() {
    let podman = Podman::set_up();
    let (_subnet, gateway) = podman.network_subnet(DEFAULT_NETWORK);
    let host_port = 8080;
    podman.start(
        "cne-web",
        &["-p", &format!("{host_port}:80")],
        &["httpd", "-f", "-p", "80", "-h", "/var/www"],
    );
    let patience = Duration::from_secs(10);
    for target in [SocketAddr::from(([127, 0, 0, 1], host_port)), SocketAddr::from((gateway, host_port))] {
        let body = http_get(podman.host().netns(), target, patience).unwrap_or_else(|err| {
            panic!("from the host through {target} [{}]: {err}", podman.plugins_label())
        });
        assert_eq!(body, INDEX_BODY, "wrong body through {target}");
    }
    // Hairpin: the container reaches itself through the gateway's published port. (busybox
    // nc, because Debian's static busybox wget crashes resolving even numeric hosts.)
    let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {gateway} {host_port}");
    let response = podman.ok(&["exec", "cne-web", "sh", "-c", &request]);
    assert!(
        response.starts_with("HTTP/1.") && response.ends_with(INDEX_BODY.trim_end()),
        "hairpin through {gateway}:{host_port} answered {response:?}"
    );
}

#[test]
fn network_create_with_subnet_puts_containers_in_it() {
    let podman = Podman::set_up();
    let subnet = "10.123.45.0/24";
    podman.ok(&["network", "create", "--subnet", subnet, "cne-net"]);
    let (created, gateway) = podman.network_subnet("cne-net");
    assert_eq!(created.to_string_cidr(), subnet);
    let (out, _) =
        podman.timed_run_rm(&["--network", "cne-net"], &["ip", "-o", "-4", "addr", "show", "eth0"]);
    let eth0 = single_ipv4(&out);
    assert!(created.contains(eth0.addr), "eth0 has {eth0:?}, outside {subnet}");
    let bridge_has_gateway = podman
        .host()
        .netns()
        .ip_json(&["-4", "addr", "show"])
        .as_array()
        .expect("ip -j addr prints an array")
        .iter()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .any(|addr| addr["local"].as_str() == Some(&gateway.to_string()));
    assert!(bridge_has_gateway, "no host interface holds the network's gateway {gateway}");
    assert!(podman.allocations("cne-net").is_empty(), "run --rm left addresses allocated on cne-net");
    podman.ok(&["network", "rm", "cne-net"]);
}

#[test]
fn requested_ip_is_honoured_and_network_reload_keeps_ip_and_mac() {
    let podman = Podman::set_up();
    let (subnet, _gateway) = podman.network_subnet(DEFAULT_NETWORK);
    let wanted = "10.88.0.50";
    assert!(subnet.contains(wanted.parse().unwrap()), "podman's default subnet changed: {subnet:?}");
    podman.start("cne-fixed", &["--ip", wanted], &["sleep", "600"]);
    let before_ip = podman.eth0_ipv4("cne-fixed");
    let before_mac = podman.eth0_mac("cne-fixed");
    assert_eq!(before_ip.addr.to_string(), wanted, "--ip not honoured");

    podman.ok(&["network", "reload", "cne-fixed"]);
    assert_eq!(podman.eth0_ipv4("cne-fixed"), before_ip, "network reload changed the address");
    assert_eq!(podman.eth0_mac("cne-fixed"), before_mac, "network reload changed the MAC");
    assert_eq!(
        podman.allocations(DEFAULT_NETWORK).into_iter().collect::<Vec<_>>(),
        vec![wanted.to_string()],
        "host-local's allocations after reload"
    );
    // Still reachable after the reload.
    podman.timed_run_rm(&[], &["ping", "-c", "1", "-W", "3", wanted]);
}

/// Starts `name` with a published port and checks that its address is allocated and that
/// rules mention it; returns the address.
fn start_with_rules(podman: &Podman, name: &str, host_port: u16, command: &[&str]) -> String {
    podman.start(name, &["-p", &format!("{host_port}:80")], command);
    let addr = podman.eth0_ipv4(name).addr.to_string();
    assert!(podman.allocations(DEFAULT_NETWORK).contains(&addr), "{name}'s address {addr} is not allocated");
    let running = HostSnapshot::take(podman.host());
    assert!(running.rules_mention(&addr), "no firewall rule mentions {name}'s address {addr}");
    addr
}

/// Polls until the host is back to `baseline` (the engine tears down asynchronously when a
/// container exits by itself); panics with the difference after `patience`.
fn wait_for_teardown(podman: &Podman, baseline: &(HostSnapshot, BTreeSet<String>), what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = (HostSnapshot::take(podman.host()), podman.allocations(DEFAULT_NETWORK));
        if now == *baseline {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{what} [{}]: host not restored.\nallocations before {:?}, after {:?}\nrule/link changes:\n{}",
                podman.plugins_label(),
                baseline.1,
                now.1,
                baseline.0.diff(&now.0)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn removal_and_self_exit_release_the_ip_and_every_rule() {
    let podman = Podman::set_up();
    // A container that stays: shared chains/tables the plugins keep for all containers
    // exist before and after, so the snapshots differ only by per-container state.
    start_with_rules(&podman, "cne-anchor", 8081, &["httpd", "-f", "-p", "80", "-h", "/var/www"]);
    // Plugins may create shared, empty structures lazily on a first ADD or DEL (the Go
    // portmap makes an empty `ip6 nat` table on DEL): one container added and removed
    // before the baseline settles those.
    start_with_rules(&podman, "cne-warmup", 8084, &["sleep", "600"]);
    podman.ok(&["rm", "--force", "--time", "0", "cne-warmup"]);
    let baseline = (HostSnapshot::take(podman.host()), podman.allocations(DEFAULT_NETWORK));

    start_with_rules(&podman, "cne-removed", 8082, &["httpd", "-f", "-p", "80", "-h", "/var/www"]);
    podman.ok(&["rm", "--force", "--time", "0", "cne-removed"]);
    wait_for_teardown(&podman, &baseline, "podman rm -f");

    // Runs long enough for the checks in start_with_rules, then exits on its own; podman's
    // cleanup (conmon's exit command) must run the DEL.
    start_with_rules(&podman, "cne-exits", 8083, &["sleep", "3"]);
    podman.ok(&["wait", "cne-exits"]);
    wait_for_teardown(&podman, &baseline, "a container that exited by itself");
    podman.ok(&["rm", "cne-exits"]);
}
