//! The `slaac` IPAM plugin against a real router (radvd) in a test namespace: through
//! `bridge` (radvd on the host-side bridge) and `macvlan` (radvd at the far end of the
//! master's link). What is reported is compared with the kernel's own state, and traffic
//! goes to the router's global address through the reported default route.

use crate::common;
mod hostile;
mod router_addresses;
mod support;
use cni_testkit::ns::TestNetns;
use cni_testkit::snapshot::Scope;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, ok};
use ipnet::Ipv6Net;
use serde_json::{json, Value};
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;
use support::*;

/// The reported address: one, in `prefix`, /64, with the router's link-local address as
/// gateway and a default route through it.
fn reported(result: &Value, prefix: &str) -> (Ipv6Net, Ipv6Addr) {
    let ips = result["ips"].as_array().unwrap();
    assert_eq!(ips.len(), 1, "{result}");
    let address: Ipv6Net = ips[0]["address"].as_str().unwrap().parse().unwrap();
    let prefix: Ipv6Net = prefix.parse().unwrap();
    assert_eq!(address.prefix_len(), 64, "{result}");
    assert!(prefix.contains(&address.addr()), "{address} is not in {prefix}");
    let gateway: Ipv6Addr = ips[0]["gateway"].as_str().unwrap().parse().unwrap();
    assert!(gateway.is_unicast_link_local(), "{result}");
    assert!(
        result["routes"].as_array().unwrap().iter().any(|r| r["dst"] == "::/0"),
        "no default route reported: {result}"
    );
    (address, gateway)
}

/// The kernel agrees: the address is on eth0 with the router's lifetimes (not made
/// permanent by the interface plugin), and the default route goes through the gateway.
fn on_the_interface(container: &TestNetns, address: Ipv6Net, gateway: Ipv6Addr) {
    let addresses = global_addresses(container, "eth0");
    let entry = addresses
        .iter()
        .find(|a| a["local"] == address.addr().to_string())
        .unwrap_or_else(|| panic!("{address} is not on eth0: {addresses:?}"));
    assert_eq!(entry["prefixlen"], 64);
    assert_eq!(entry["dynamic"], true, "the address lost its lifetimes: {entry}");
    assert_ne!(entry["valid_life_time"], json!(4294967295u32), "{entry}");
    let routes = default_routes(container);
    assert!(
        routes.iter().any(|r| r["gateway"] == gateway.to_string() && r["dev"] == "eth0"),
        "no default route via {gateway}: {routes:?}"
    );
}

fn echo(container: &TestNetns, server_ns: &TestNetns, router: &str, port: u16) {
    let addr = SocketAddr::new(router.parse().unwrap(), port);
    let _server = tcp_echo_server(server_ns.netns(), addr).unwrap();
    tcp_echo(container.netns(), addr, b"over slaac", Duration::from_secs(5)).unwrap();
}

#[test]
fn bridge_reports_the_advertised_address_checks_deletes_and_adds_again() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let conf = bridge_conf(json!({"type": "slaac"}));
    let result = add("bridge", host, container, &conf);
    let (address, gateway) = reported(&result, BRIDGE_PREFIX);
    assert_eq!(result["ips"][0]["interface"], 2, "{result}");
    on_the_interface(container, address, gateway);
    echo(container, host, BRIDGE_ROUTER, 7051);

    let mut checked = conf.clone();
    checked["prevResult"] = result.clone();
    ok(call("bridge", "CHECK", host, Some(container), &checked).run());

    ok(call("bridge", "DEL", host, Some(container), &checked).run());
    common::wait_link_gone(container, "eth0");
    ok(call("bridge", "DEL", host, Some(container), &checked).run());

    let again = add("bridge", host, container, &conf);
    let (address, gateway) = reported(&again, BRIDGE_PREFIX);
    on_the_interface(container, address, gateway);
    echo(container, host, BRIDGE_ROUTER, 7052);
}

#[test]
fn check_fails_once_the_address_is_gone() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let mut conf = bridge_conf(json!({"type": "slaac"}));
    let result = add("bridge", host, container, &conf);
    let (address, _) = reported(&result, BRIDGE_PREFIX);
    run_ip(container, &["addr", "del", &address.to_string(), "dev", "eth0"]);
    conf["prevResult"] = result;
    let out = call("bridge", "CHECK", host, Some(container), &conf).run();
    assert!(!out.success(), "CHECK passed without the address");
    assert!(out.stdout.contains(&address.addr().to_string()), "{}", out.stdout);
}

#[test]
fn macvlan_reports_the_advertised_address_and_reaches_the_router() {
    cni_testkit::ns::require_root();
    let lan = macvlan_lan(1, &plain_router(LAN_PREFIX));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let conf = macvlan_conf(json!({"type": "slaac", "timeout": 20}));
    let result = add("macvlan", host, container, &conf);
    let (address, gateway) = reported(&result, LAN_PREFIX);
    // The address is derived from the macvlan's MAC (EUI-64).
    let mac: cni_net::MacAddr = result["interfaces"][0]["mac"].as_str().unwrap().parse().unwrap();
    let m = mac.0;
    let iid = [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]];
    assert_eq!(&address.addr().octets()[8..], &iid, "{address} is not the EUI-64 address of {mac}");
    on_the_interface(container, address, gateway);
    echo(container, &lan.lan, LAN_ROUTER, 7053);

    ok(call("macvlan", "DEL", host, Some(container), &conf).run());
    let again = add("macvlan", host, container, &conf);
    reported(&again, LAN_PREFIX);
}

/// host-device moves the LAN-facing link itself into the container, then asks slaac; DEL
/// gives it back to the host.
#[test]
fn host_device_reports_the_advertised_address_and_gives_the_device_back() {
    cni_testkit::ns::require_root();
    let lan = macvlan_lan(1, &plain_router(LAN_PREFIX));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let dir = tempfile::Builder::new().prefix("sl-hd").tempdir().unwrap();
    let conf = json!({"cniVersion": "1.1.0", "name": "slnet", "type": "host-device", "device": MASTER,
        "dataDir": dir.path(), "ipam": {"type": "slaac"}});
    let result = add("host-device", host, container, &conf);
    let (address, gateway) = reported(&result, LAN_PREFIX);
    on_the_interface(container, address, gateway);
    echo(container, &lan.lan, LAN_ROUTER, 7054);
    ok(call("host-device", "DEL", host, Some(container), &conf).run());
    assert!(host.netlink().unwrap().link_by_name(MASTER).unwrap().is_some(), "{MASTER} is not back");
}

#[test]
fn no_router_is_code_11_within_the_timeout_and_changes_nothing() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, None);
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let scope = Scope::new().netns("host", host).netns("container", container);
    let before = settled(&scope);
    let conf = bridge_conf(json!({"type": "slaac", "timeout": 1.5}));
    let out = call("bridge", "ADD", host, Some(container), &conf).run();
    assert!(!out.success(), "ADD succeeded without a router: {}", out.stdout);
    let error = out.error();
    assert_eq!(error.code, 11, "{}", out.stdout);
    assert!(error.msg.contains("eth0") && error.msg.contains("ipam.timeout"), "{}", error.msg);
    common::wait_link_gone(container, "eth0");
    let deadline = std::time::Instant::now() + common::EVENTUALLY;
    loop {
        let left = scope.take().diff(&before);
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the failed ADD left something behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The IPAM plugin on its own, on an interface that was down with autoconfiguration off:
/// a failed ADD puts back every setting it changed and the link's state.
#[test]
fn a_failed_add_puts_back_what_it_enabled() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, None);
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let container_path = container.path().display().to_string();
    run_ip(host, &["link", "add", "slv0", "type", "veth", "peer", "name", "eth0", "netns", &container_path]);
    run_ip(host, &["link", "set", "slv0", "master", BRIDGE, "up"]);
    let keys = ["autoconf", "accept_ra", "max_addresses", "use_tempaddr"];
    for (key, value) in keys.iter().zip(["0", "0", "0", "1"]) {
        cni_net::sysctl::write_in(container.netns(), &format!("net/ipv6/conf/eth0/{key}"), value).unwrap();
    }
    let read = || -> Vec<String> {
        keys.iter()
            .map(|k| cni_net::sysctl::read_in(container.netns(), &format!("net/ipv6/conf/eth0/{k}")).unwrap())
            .collect()
    };
    let settings = read();
    let conf = json!({"cniVersion": "1.1.0", "name": "slnet", "ipam": {"type": "slaac", "timeout": 1}});
    let out = call("slaac", "ADD", host, Some(container), &conf).ifname("eth0").run();
    assert_eq!(out.error().code, 11, "{}", out.stdout);
    assert_eq!(read(), settings);
    // The link is down again, without addresses or routes (a snapshot would differ in
    // the qdisc the kernel attached when the link first came up, which stays).
    let eth0 = container.netlink().unwrap().require_link("eth0").unwrap();
    assert!(!eth0.up, "eth0 was left up");
    assert_eq!(container.ip_json(&["addr", "show", "dev", "eth0"])[0]["addr_info"], json!([]));
    assert_eq!(container.ip_json(&["-6", "route", "show", "table", "all", "dev", "eth0"]), json!([]));
}

/// A container that forwards (a router of its own) keeps forwarding: the interface takes
/// advertisements through accept_ra=2 instead.
#[test]
fn a_forwarding_container_keeps_forwarding() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    for key in ["all", "default"] {
        cni_net::sysctl::write_in(container.netns(), &format!("net/ipv6/conf/{key}/forwarding"), "1")
            .unwrap();
    }
    let result = add("bridge", host, container, &bridge_conf(json!({"type": "slaac"})));
    let (address, gateway) = reported(&result, BRIDGE_PREFIX);
    on_the_interface(container, address, gateway);
    let read = |key: &str| {
        cni_net::sysctl::read_in(container.netns(), &format!("net/ipv6/conf/eth0/{key}")).unwrap()
    };
    assert_eq!((read("forwarding"), read("accept_ra")), ("1".to_string(), "2".to_string()));
}

/// The IPAM plugin's own DEL on an interface that stays: autoconfiguration off, its
/// addresses gone; a second DEL is success.
#[test]
fn del_removes_the_autoconfigured_addresses_and_is_idempotent() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let container_path = container.path().display().to_string();
    run_ip(host, &["link", "add", "slv0", "type", "veth", "peer", "name", "eth0", "netns", &container_path]);
    run_ip(host, &["link", "set", "slv0", "master", BRIDGE, "up"]);
    let conf = json!({"cniVersion": "1.1.0", "name": "slnet", "ipam": {"type": "slaac"}});
    let result = call("slaac", "ADD", host, Some(container), &conf).ifname("eth0").run().json();
    let (address, gateway) = reported(&result, BRIDGE_PREFIX);
    on_the_interface(container, address, gateway);
    for _ in 0..2 {
        ok(call("slaac", "DEL", host, Some(container), &conf).ifname("eth0").run());
        assert_eq!(global_addresses(container, "eth0"), Vec::<Value>::new());
        let autoconf = cni_net::sysctl::read_in(container.netns(), "net/ipv6/conf/eth0/autoconf").unwrap();
        assert_eq!(autoconf, "0");
    }
}

#[test]
fn an_interface_that_is_not_there_is_a_clear_error() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, None);
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let conf = json!({"cniVersion": "1.1.0", "name": "slnet", "ipam": {"type": "slaac"}});
    let out = call("slaac", "ADD", host, Some(container), &conf).ifname("eth0").run();
    assert!(out.error().msg.contains("eth0 is not in the container"), "{}", out.stdout);
    // DEL of what is not there is success.
    ok(call("slaac", "DEL", host, Some(container), &conf).ifname("eth0").run());
}

/// The bridge as gateway would take the router's link-local address: refused before any
/// link is made.
#[test]
fn bridge_as_gateway_with_slaac_is_refused() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, None);
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    for key in ["isGateway", "isDefaultGateway"] {
        let mut conf = bridge_conf(json!({"type": "slaac"}));
        conf[key] = json!(true);
        let scope = Scope::new().netns("host", host).netns("container", container);
        let before = settled(&scope);
        let out = call("bridge", "ADD", host, Some(container), &conf).run();
        let error = out.error();
        assert_eq!(error.code, 7, "{key}: {}", out.stdout);
        assert!(error.msg.contains("isGateway") && error.msg.contains("slaac"), "{}", error.msg);
        assert_eq!(scope.take().diff(&before), Vec::<String>::new(), "{key}");
    }
}

#[test]
fn a_timeout_out_of_bounds_is_refused_naming_the_key() {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, None);
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    for bad in [json!(0), json!(61), json!(-1), json!("10s")] {
        let conf = bridge_conf(json!({"type": "slaac", "timeout": bad}));
        let out = call("bridge", "ADD", host, Some(container), &conf).run();
        let error = out.error();
        assert!(error.code == 7 || error.code == 6, "{bad}: {}", out.stdout);
        assert!(error.msg.contains("timeout"), "{bad}: {}", error.msg);
        common::wait_link_gone(container, "eth0");
    }
}
