//! `vlan` in the kernel rig: traffic within a VLAN, none across VLANs, bad input.

use crate::common::{add, call, ok};
use crate::{assert_refused_leaving_nothing, check_and_delete_idempotently, ip, segment};
use cni_net::netlink::LinkKind;
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const PREFIX: &str = "ckv";

fn conf(master: &str, vlan_id: i64, address: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": "vlannet", "type": "vlan", "master": master, "vlanId": vlan_id,
        "ipam": {"type": "static", "addresses": [{"address": address}]}})
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn same_vlan_talks_other_vlan_does_not() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let (a, b, c) = (&env.containers[0], &env.containers[1], &env.containers[2]);
    segment(&env.host, &["m1", "m2", "m3"]);
    let ra = add("vlan", &env.host, a, &conf("m1", 100, "10.93.0.2/24"));
    add("vlan", &env.host, b, &conf("m2", 100, "10.93.0.3/24"));
    add("vlan", &env.host, c, &conf("m3", 200, "10.93.0.4/24"));
    assert_eq!(ra["interfaces"][0]["name"], "eth0");
    assert_eq!(ra["ips"][0]["interface"], 0);
    let shown = a.ip_json(&["-d", "link", "show", "eth0"]);
    assert_eq!(shown[0]["linkinfo"]["info_kind"], "vlan");
    assert_eq!(shown[0]["linkinfo"]["info_data"]["id"], 100);

    let to_b: SocketAddr = "10.93.0.3:7201".parse().unwrap();
    let _server_b = tcp_echo_server(b.netns(), to_b).unwrap();
    tcp_echo(a.netns(), to_b, b"same vlan", Duration::from_secs(5)).unwrap();
    let to_c: SocketAddr = "10.93.0.4:7202".parse().unwrap();
    let _server_c = tcp_echo_server(c.netns(), to_c).unwrap();
    assert!(
        tcp_echo(a.netns(), to_c, b"other vlan", Duration::from_secs(2)).is_err(),
        "VLAN 100 reached VLAN 200"
    );
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn verbs_mtu_and_link_in_container() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    segment(&env.host, &["m1"]);
    let mut c = conf("m1", 0, "10.94.0.2/24");
    c["mtu"] = json!(1400);
    let result = add("vlan", &env.host, a, &c);
    let eth0 = a.netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!((eth0.kind, eth0.mtu), (LinkKind::Vlan, 1400));
    c["prevResult"] = result;
    check_and_delete_idempotently(&env, a, &c);
    let status = conf("m1", 0, "10.94.0.2/24");
    ok(call("vlan", "STATUS", &env.host, None, &status).run());
    ok(call("vlan", "GC", &env.host, None, &status).run());

    // The master inside the container.
    ip(b, &["link", "add", "inner", "type", "dummy"]);
    ip(b, &["link", "set", "inner", "up"]);
    let mut inside = conf("inner", 7, "10.94.1.2/24");
    inside["linkInContainer"] = json!(true);
    add("vlan", &env.host, b, &inside);
    let shown = b.ip_json(&["-d", "link", "show", "eth0"]);
    assert_eq!(shown[0]["link"], "inner");
    assert_eq!(shown[0]["linkinfo"]["info_data"]["id"], 7);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn bad_input_is_refused_and_leaves_nothing() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    segment(&env.host, &["m1"]);
    let data = tempfile::tempdir().unwrap();
    let host_local =
        json!({"type": "host-local", "dataDir": data.path(), "ranges": [[{"subnet": "10.95.0.0/24"}]]});
    let cases: [(Value, &str); 5] = [
        (json!({"master": "m1", "vlanId": 4095}), "vlanId"),
        (json!({"master": "m1", "vlanId": -1}), "vlanId"),
        (json!({"vlanId": 10}), "master"),
        (json!({"master": "nosuchlink", "vlanId": 10}), "master"),
        (json!({"master": "m1", "vlanId": 10, "mtu": 9000}), "mtu"),
    ];
    let base = json!({"cniVersion": "1.0.0", "name": "vlannet", "type": "vlan", "ipam": host_local});
    assert_refused_leaving_nothing(&env, a, &base, &cases, data.path());
    let host_vlans = env.host.netlink().unwrap().links().unwrap();
    assert!(host_vlans.iter().all(|l| l.kind != LinkKind::Vlan));
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn check_compares_the_vlan_id() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    segment(&env.host, &["m1"]);
    let mut c = conf("m1", 100, "10.94.2.2/24");
    c["prevResult"] = add("vlan", &env.host, a, &c);
    ok(call("vlan", "CHECK", &env.host, Some(a), &c).run());
    // The same link, name and addresses, checked against another VLAN id.
    let mut other = c.clone();
    other["vlanId"] = json!(200);
    let err = call("vlan", "CHECK", &env.host, Some(a), &other).run().error();
    assert!(err.msg.contains("VLAN 100") && err.msg.contains("vlanId 200"), "{}", err.msg);
    // The link replaced by one on VLAN 200 (same name, addresses, kind): CHECK sees it.
    ip(a, &["link", "del", "eth0"]);
    ip(a, &["link", "add", "inner", "type", "dummy"]);
    ip(a, &["link", "add", "link", "inner", "name", "eth0", "type", "vlan", "id", "200"]);
    ip(a, &["addr", "add", "10.94.2.2/24", "dev", "eth0"]);
    ip(a, &["link", "set", "inner", "up"]);
    ip(a, &["link", "set", "eth0", "up"]);
    let mut replaced = c.clone();
    replaced["prevResult"]["interfaces"][0]["mac"] =
        json!(a.ip_json(&["link", "show", "eth0"])[0]["address"]);
    let err = call("vlan", "CHECK", &env.host, Some(a), &replaced).run().error();
    assert!(err.msg.contains("VLAN 200") && err.msg.contains("vlanId 100"), "{}", err.msg);
}
