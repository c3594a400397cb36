//! `vrf` in the kernel rig: routing isolation with real traffic, the table read back from
//! the kernel, several VRFs in one container, removal with the last interface, every verb
//! and version, bad input.
//!
//! The container's interfaces are veth pairs made by the test (the vrf plugin only needs
//! a `prevResult` naming them): `eth<n>` in the container with 10.81.<n>.2/24 and
//! fd81:<n>::2/64, a route to 10.90.<n>.0/24 and fd90:<n>::/64 via the peer, the peer end
//! in a namespace of its own with 10.81.<n>.1 and fd81:<n>::1.

use crate::common::{add, call, ok};
use crate::ip;
use cni_net::netlink::{IpFamily, Route, RouteProtocol, MAIN_TABLE};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::udp_echo_server;
use serde_json::{json, Value};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const PREFIX: &str = "vrf";

/// Gives the container `eth<n>`, its peer end in `peer`, addressed and routed as the
/// module describes.
fn wire(container: &TestNetns, peer: &TestNetns, n: u8) {
    let (ifname, peer_if) = (format!("eth{n}"), format!("vrp{n}"));
    ip(container, &["link", "add", &ifname, "type", "veth", "peer", "name", &peer_if, "netns", peer.name()]);
    ip(container, &["addr", "add", &format!("10.81.{n}.2/24"), "dev", &ifname]);
    ip(container, &["addr", "add", &format!("fd81:{n}::2/64"), "dev", &ifname, "nodad"]);
    ip(container, &["link", "set", &ifname, "up"]);
    ip(container, &["route", "add", &format!("10.90.{n}.0/24"), "via", &format!("10.81.{n}.1")]);
    ip(container, &["route", "add", &format!("fd90:{n}::/64"), "via", &format!("fd81:{n}::1")]);
    ip(peer, &["addr", "add", &format!("10.81.{n}.1/24"), "dev", &peer_if]);
    ip(peer, &["addr", "add", &format!("fd81:{n}::1/64"), "dev", &peer_if, "nodad"]);
    ip(peer, &["link", "set", &peer_if, "up"]);
}

/// What an interface plugin would have returned for `eth<n>`.
fn prev_result(version: &str, container: &TestNetns, n: u8) -> Value {
    let mut ips = vec![
        json!({"address": format!("10.81.{n}.2/24"), "gateway": format!("10.81.{n}.1"), "interface": 0}),
        json!({"address": format!("fd81:{n}::2/64"), "gateway": format!("fd81:{n}::1"), "interface": 0}),
    ];
    if version.starts_with("0.") {
        ips[0]["version"] = json!("4");
        ips[1]["version"] = json!("6");
    }
    json!({"cniVersion": version, "interfaces": [{"name": format!("eth{n}"), "sandbox": container.path()}],
        "ips": ips, "routes": [{"dst": format!("10.90.{n}.0/24")}]})
}

fn conf(version: &str, vrfname: &str, table: Option<u32>, prev: Option<Value>) -> Value {
    let mut c = json!({"cniVersion": version, "name": "vrfnet", "type": "vrf", "vrfname": vrfname});
    if let Some(table) = table {
        c["table"] = json!(table);
    }
    if let Some(prev) = prev {
        c["prevResult"] = prev;
    }
    c
}

/// ADD for `eth<n>` (ifname and container id per interface: separate attachments).
fn add_iface(env: &HostAndContainers, c: &TestNetns, n: u8, vrfname: &str, table: Option<u32>) -> Value {
    let conf = conf("1.1.0", vrfname, table, Some(prev_result("1.1.0", c, n)));
    let out = call("vrf", "ADD", &env.host, Some(c), &conf).ifname(&format!("eth{n}")).run();
    let result = out.json();
    assert_eq!(result["interfaces"], conf["prevResult"]["interfaces"], "the result passes through");
    conf
}

fn del_iface(env: &HostAndContainers, c: &TestNetns, n: u8, conf: &Value) {
    ok(call("vrf", "DEL", &env.host, Some(c), conf).ifname(&format!("eth{n}")).run());
}

/// The VRF's table as `ip -d link` reports it, and the master of each named interface.
fn vrf_table(c: &TestNetns, vrf: &str) -> u64 {
    let shown = c.ip_json(&["-d", "link", "show", vrf]);
    assert_eq!(shown[0]["linkinfo"]["info_kind"], "vrf", "{shown}");
    shown[0]["linkinfo"]["info_data"]["table"].as_u64().unwrap()
}

fn master_of(c: &TestNetns, ifname: &str) -> Option<String> {
    c.ip_json(&["link", "show", ifname])[0]["master"].as_str().map(str::to_string)
}

/// `(destination, gateway)` of the routes through `ifname` in `table` that are not the
/// kernel's own local/broadcast ones, as the kernel lists them.
fn routes_in(c: &TestNetns, family: IpFamily, table: u32, ifname: &str) -> Vec<(String, Option<String>)> {
    let mut nl = c.netlink().unwrap();
    let index = nl.require_link(ifname).unwrap().index;
    let mut routes: Vec<(String, Option<String>)> = nl
        .routes(family, Some(table))
        .unwrap()
        .into_iter()
        .filter(|r: &Route| r.oif == Some(index) && r.kind == cni_net::netlink::RouteType::Unicast)
        .filter(|r| {
            !(r.protocol == RouteProtocol::Kernel
                && r.destination.addr().is_ipv6()
                && r.destination.to_string().starts_with("fe80"))
        })
        .map(|r| (r.destination.to_string(), r.gateway.map(|g| g.to_string())))
        .collect();
    routes.sort();
    routes
}

/// Every route of every table, both families, as `ip -j` lists them; without the
/// link-local ones, which come and go with the veths' own DAD, not with the plugin.
fn every_route(c: &TestNetns) -> Vec<Value> {
    let mut all = c.ip_json(&["route", "show", "table", "all"]).as_array().unwrap().clone();
    all.extend(c.ip_json(&["-6", "route", "show", "table", "all"]).as_array().unwrap().iter().cloned());
    all.retain(|r| !r["dst"].as_str().is_some_and(|d| d.starts_with("fe80")));
    all
}

/// A UDP exchange with `to` from a socket bound to `device` (a VRF, or none: the main
/// table): whether the echo came back.
fn udp_through(c: &TestNetns, device: Option<&str>, to: SocketAddr) -> bool {
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
    let socket = c.run(|| UdpSocket::bind(any)).unwrap().unwrap();
    if let Some(device) = device {
        cni_os::inet::bind_to_device(&socket, device)
            .unwrap_or_else(|e| panic!("SO_BINDTODEVICE {device}: {e}"));
    }
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    if socket.send_to(b"vrf", to).is_err() {
        return false; // no route: ENETUNREACH
    }
    let mut buf = [0u8; 8];
    matches!(socket.recv_from(&mut buf), Ok((3, from)) if from == to)
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn vrfs_isolate_routing_and_honour_table() {
    require_rig();
    // containers[0] is the container; [1] and [2] are the peers of eth1 and eth2.
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let (c, p1, p2) = (&env.containers[0], &env.containers[1], &env.containers[2]);
    wire(c, p1, 1);
    wire(c, p2, 2);
    add_iface(&env, c, 1, "red", Some(1001));
    add_iface(&env, c, 2, "blue", None);

    // The kernel's view: the tables, the masters, the routes moved with their interface.
    assert_eq!(vrf_table(c, "red"), 1001);
    assert_eq!(vrf_table(c, "blue"), 1, "the first table nothing uses");
    assert_eq!(master_of(c, "eth1").as_deref(), Some("red"));
    assert_eq!(master_of(c, "eth2").as_deref(), Some("blue"));
    let own = |n: u8| {
        vec![(format!("10.81.{n}.0/24"), None), (format!("10.90.{n}.0/24"), Some(format!("10.81.{n}.1")))]
    };
    assert_eq!(routes_in(c, IpFamily::V4, 1001, "eth1"), own(1));
    assert_eq!(routes_in(c, IpFamily::V4, 1, "eth2"), own(2));
    assert_eq!(
        routes_in(c, IpFamily::V6, 1001, "eth1"),
        [("fd81:1::/64".to_string(), None), ("fd90:1::/64".to_string(), Some("fd81:1::1".to_string()))]
    );
    for n in [1, 2] {
        assert!(routes_in(c, IpFamily::V4, MAIN_TABLE, &format!("eth{n}")).is_empty());
        assert!(routes_in(c, IpFamily::V6, MAIN_TABLE, &format!("eth{n}")).is_empty());
    }
    let eth1_v6 = c.ip_json(&["-6", "addr", "show", "eth1", "scope", "global"]);
    assert_eq!(eth1_v6[0]["addr_info"][0]["local"], "fd81:1::2", "the IPv6 address survived enslaving");

    // Real traffic: each VRF reaches its own peer only; the main table reaches neither.
    let to_p1: SocketAddr = "10.81.1.1:7401".parse().unwrap();
    let to_p2: SocketAddr = "10.81.2.1:7402".parse().unwrap();
    let to_p1_v6: SocketAddr = "[fd81:1::1]:7403".parse().unwrap();
    let _s1 = udp_echo_server(p1.netns(), to_p1).unwrap();
    let _s2 = udp_echo_server(p2.netns(), to_p2).unwrap();
    let _s3 = udp_echo_server(p1.netns(), to_p1_v6).unwrap();
    assert!(udp_through(c, Some("red"), to_p1), "red reaches its own peer");
    assert!(udp_through(c, Some("red"), to_p1_v6), "red reaches its own peer over IPv6");
    assert!(udp_through(c, Some("blue"), to_p2), "blue reaches its own peer");
    assert!(!udp_through(c, Some("red"), to_p2), "red reached blue's peer");
    assert!(!udp_through(c, Some("blue"), to_p1), "blue reached red's peer");
    assert!(!udp_through(c, None, to_p1), "the main table reached into red");
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn the_vrf_goes_with_its_last_interface_and_del_is_idempotent() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (c, p) = (&env.containers[0], &env.containers[1]);
    wire(c, p, 1);
    wire(c, p, 2);
    let conf1 = add_iface(&env, c, 1, "red", Some(77));
    let conf2 = add_iface(&env, c, 2, "red", None);
    assert_eq!(vrf_table(c, "red"), 77);
    assert_eq!(master_of(c, "eth2").as_deref(), Some("red"), "the second attachment joined the VRF");

    del_iface(&env, c, 1, &conf1);
    assert_eq!(master_of(c, "eth1"), None);
    assert_eq!(vrf_table(c, "red"), 77, "the VRF stays while eth2 is in it");
    // eth1's routes came back to the main table, and left the VRF's.
    assert_eq!(
        routes_in(c, IpFamily::V4, MAIN_TABLE, "eth1"),
        [("10.81.1.0/24".to_string(), None), ("10.90.1.0/24".to_string(), Some("10.81.1.1".to_string()))]
    );
    assert!(routes_in(c, IpFamily::V4, 77, "eth1").is_empty());
    assert_eq!(routes_in(c, IpFamily::V6, MAIN_TABLE, "eth1").len(), 2);

    del_iface(&env, c, 2, &conf2);
    assert!(
        c.netlink().unwrap().link_by_name("red").unwrap().is_none(),
        "the VRF outlived its last interface"
    );
    assert_eq!(master_of(c, "eth2"), None);
    // Again, without prevResult, and without a namespace: nothing to do, success.
    del_iface(&env, c, 2, &conf2);
    let mut bare = conf2.clone();
    bare.as_object_mut().unwrap().remove("prevResult");
    del_iface(&env, c, 2, &bare);
    ok(call("vrf", "DEL", &env.host, None, &conf2).container_id("gone").ifname("eth2").run());
    // CHECK now finds the VRF gone.
    let err = call("vrf", "CHECK", &env.host, Some(c), &conf2).ifname("eth2").run().error();
    assert!(err.msg.contains("red"), "{}", err.msg);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn check_detects_a_missing_enslavement_and_a_changed_table() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (c, p) = (&env.containers[0], &env.containers[1]);
    wire(c, p, 1);
    let conf = add_iface(&env, c, 1, "red", Some(1001));
    ok(call("vrf", "CHECK", &env.host, Some(c), &conf).ifname("eth1").run());
    let mut other_table = conf.clone();
    other_table["table"] = json!(1002);
    let err = call("vrf", "CHECK", &env.host, Some(c), &other_table).ifname("eth1").run().error();
    assert!(err.msg.contains("1001") && err.msg.contains("1002"), "{}", err.msg);
    ip(c, &["link", "set", "eth1", "nomaster"]);
    let err = call("vrf", "CHECK", &env.host, Some(c), &conf).ifname("eth1").run().error();
    assert!(err.msg.contains("eth1") && err.msg.contains("not enslaved"), "{}", err.msg);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn bad_input_is_refused_and_changes_nothing() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (c, p) = (&env.containers[0], &env.containers[1]);
    wire(c, p, 1);
    wire(c, p, 2);
    add_iface(&env, c, 1, "red", Some(1001));
    let links_before = c.ip_json(&["-d", "link", "show"]);
    let routes_before = every_route(c);

    let prev = Some(prev_result("1.0.0", c, 2));
    let cases: [(Value, &str); 7] = [
        // The same VRF with another table, and another VRF on red's table.
        (conf("1.0.0", "red", Some(1002), prev.clone()), "table"),
        (conf("1.0.0", "blue", Some(1001), prev.clone()), "table"),
        (conf("1.0.0", "blue", Some(254), prev.clone()), "table"),
        (conf("1.0.0", "blue", None, None), "prevResult"),
        (conf("1.0.0", "", None, prev.clone()), "vrfname"),
        (conf("1.0.0", "a-name-too-long-for-a-link", None, prev.clone()), "vrfname"),
        // A link of that name that is not a VRF.
        (conf("1.0.0", "eth1", None, prev.clone()), "vrfname"),
    ];
    for (conf, field) in cases {
        let err = call("vrf", "ADD", &env.host, Some(c), &conf).ifname("eth2").run().error();
        assert_eq!(err.code, 7, "{conf}: {}", err.msg);
        assert!(err.msg.contains(field), "{conf}: {}", err.msg);
    }
    // A table that is not a number is refused by the parser, naming the field.
    let err = call(
        "vrf",
        "ADD",
        &env.host,
        Some(c),
        &json!({"cniVersion": "1.0.0", "name": "vrfnet",
        "type": "vrf", "vrfname": "blue", "table": -1, "prevResult": prev}),
    )
    .ifname("eth2")
    .run()
    .error();
    assert_eq!((err.code, err.msg.contains("table")), (7, true), "{}", err.msg);

    // An interface the prevResult names but the container lacks: refused before the VRF
    // is made.
    let mut missing = prev_result("1.0.0", c, 9);
    missing["interfaces"][0]["sandbox"] = json!(c.path());
    let err = call("vrf", "ADD", &env.host, Some(c), &conf("1.0.0", "blue", None, Some(missing)))
        .ifname("eth9")
        .run()
        .error();
    assert!(err.msg.contains("eth9"), "{}", err.msg);

    assert_eq!(c.ip_json(&["-d", "link", "show"]), links_before, "a refused ADD changed the links");
    let routes_after = every_route(c);
    assert_eq!(routes_after, routes_before, "a refused ADD changed the routes");
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn every_verb_in_every_version() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (c, p) = (&env.containers[0], &env.containers[1]);
    let versions = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    for (i, version) in versions.into_iter().enumerate() {
        let n = i as u8 + 1;
        wire(c, p, n);
        let ifname = format!("eth{n}");
        let vrfname = format!("v{n}");
        // Before 0.3.0 a chained plugin gets no prevResult and describes the interface.
        let with_prev = !version.starts_with("0.1") && !version.starts_with("0.2");
        let prev = with_prev.then(|| prev_result(version, c, n));
        let conf = conf(version, &vrfname, None, prev);
        let result = call("vrf", "ADD", &env.host, Some(c), &conf).ifname(&ifname).run().json();
        assert_eq!(result["cniVersion"], version);
        let address = if with_prev { &result["ips"][0]["address"] } else { &result["ip4"]["ip"] };
        assert_eq!(address.as_str(), Some(format!("10.81.{n}.2/24").as_str()), "{version}: {result}");
        assert_eq!(master_of(c, &ifname).as_deref(), Some(vrfname.as_str()), "{version}");
        if version >= "0.4.0" {
            ok(call("vrf", "CHECK", &env.host, Some(c), &conf).ifname(&ifname).run());
        }
        ok(call("vrf", "DEL", &env.host, Some(c), &conf).ifname(&ifname).run());
        assert!(c.netlink().unwrap().link_by_name(&vrfname).unwrap().is_none(), "{version}");
        if version >= "1.1.0" {
            ok(call("vrf", "STATUS", &env.host, None, &conf).run());
            let mut gc = conf.clone();
            gc["cni.dev/valid-attachments"] = json!([]);
            ok(call("vrf", "GC", &env.host, None, &gc).run());
        }
    }
    let out = call("vrf", "VERSION", &env.host, None, &json!({"cniVersion": "1.1.0"})).run().json();
    assert_eq!(out["supportedVersions"].as_array().unwrap().len(), 7);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn a_result_with_several_container_interfaces_enslaves_them_all() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (c, p) = (&env.containers[0], &env.containers[1]);
    wire(c, p, 1);
    wire(c, p, 2);
    let mut prev = prev_result("1.1.0", c, 1);
    prev["interfaces"] = json!([{"name": "hostside"}, {"name": "eth1", "sandbox": c.path()}, {"name": "eth2", "sandbox": c.path()}]);
    let conf = conf("1.1.0", "red", None, Some(prev));
    add("vrf", &env.host, c, &conf);
    assert_eq!(master_of(c, "eth1").as_deref(), Some("red"));
    assert_eq!(master_of(c, "eth2").as_deref(), Some("red"));
    ok(call("vrf", "CHECK", &env.host, Some(c), &conf).run());
    ok(call("vrf", "DEL", &env.host, Some(c), &conf).run());
    assert_eq!((master_of(c, "eth1"), master_of(c, "eth2")), (None, None));
    assert!(c.netlink().unwrap().link_by_name("red").unwrap().is_none());
}
