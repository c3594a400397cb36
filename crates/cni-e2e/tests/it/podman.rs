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

/// Runs `ip args` in the engines' host namespace (test set-up, not part of what is tested).
fn host_ip(podman: &Podman, args: &[&str]) {
    let out = podman.host().netns().command("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The link kind and macvlan mode of `container`'s `eth0`, read with the host's iproute2
/// in the container's network namespace (busybox's `ip` has no details).
fn eth0_kind_and_mode(podman: &Podman, container: &str) -> (String, String) {
    let sandbox = podman.ok(&["inspect", container, "--format", "{{.NetworkSettings.SandboxKey}}"]);
    let netns = podman.host().private_path(&sandbox);
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["ip", "-d", "-j", "link", "show", "eth0"])
        .output()
        .expect("run nsenter ip");
    assert!(out.status.success(), "ip -d link in {container}: {}", String::from_utf8_lossy(&out.stderr));
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
    let info = &links[0]["linkinfo"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("none").to_string();
    (text(&info["info_kind"]), text(&info["info_data"]["mode"]))
}

#[test]
fn network_create_macvlan_puts_two_containers_on_one_master() {
    let podman = Podman::set_up();
    // The master: one end of a veth pair standing in for the host's NIC.
    host_ip(&podman, &["link", "add", "cne-mvm", "type", "veth", "peer", "name", "cne-mvp"]);
    host_ip(&podman, &["link", "set", "cne-mvp", "up"]);
    host_ip(&podman, &["link", "set", "cne-mvm", "up"]);
    let subnet = "10.123.46.0/24";
    podman.ok(&[
        "network",
        "create",
        "-d",
        "macvlan",
        "-o",
        "parent=cne-mvm",
        "--subnet",
        subnet,
        "cne-macvlan",
    ]);
    let links_before = HostSnapshot::take(podman.host());

    podman.start("cne-mv-a", &["--network", "cne-macvlan"], &["sleep", "600"]);
    podman.start("cne-mv-b", &["--network", "cne-macvlan"], &["sleep", "600"]);
    let (created, _gateway) = podman.network_subnet("cne-macvlan");
    let a = podman.eth0_ipv4("cne-mv-a");
    let b = podman.eth0_ipv4("cne-mv-b");
    for (name, addr) in [("cne-mv-a", &a), ("cne-mv-b", &b)] {
        assert!(created.contains(addr.addr), "{name}'s eth0 has {addr:?}, outside {subnet}");
        assert_eq!(
            eth0_kind_and_mode(&podman, name),
            ("macvlan".to_string(), "bridge".to_string()),
            "{name}'s eth0 is not a bridge-mode macvlan [{}]",
            podman.plugins_label()
        );
    }
    assert_ne!(a.addr, b.addr, "both containers got the same address");
    assert_eq!(
        podman.allocations("cne-macvlan"),
        [a.addr.to_string(), b.addr.to_string()].into_iter().collect(),
        "host-local's allocations on cne-macvlan"
    );
    podman.ok(&["exec", "cne-mv-a", "ping", "-c", "1", "-W", "3", &b.addr.to_string()]);
    podman.ok(&["exec", "cne-mv-b", "ping", "-c", "1", "-W", "3", &a.addr.to_string()]);

    podman.ok(&["rm", "--force", "--time", "0", "cne-mv-a", "cne-mv-b"]);
    assert!(podman.allocations("cne-macvlan").is_empty(), "rm left addresses allocated on cne-macvlan");
    let links_after = HostSnapshot::take(podman.host());
    assert!(links_before == links_after, "rm changed the host:\n{}", links_before.diff(&links_after));
    podman.ok(&["network", "rm", "cne-macvlan"]);
}
