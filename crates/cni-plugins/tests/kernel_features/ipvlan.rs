//! `ipvlan` in the kernel rig: traffic in each mode, the verbs, chaining, bad input.

use crate::common::{add, call, ok};
use crate::{assert_refused_leaving_nothing, check_and_delete_idempotently, ip};
use cni_net::netlink::LinkKind;
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const PREFIX: &str = "cki";

fn conf(mode: &str, address: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": "ipvlannet", "type": "ipvlan", "master": "m0", "mode": mode,
        "ipam": {"type": "static", "addresses": [{"address": address}]}})
}

/// A master on the host: a dummy device, up. IPvlan links of one master reach each other
/// inside the driver, so no wire is needed behind it.
fn host_master(env: &HostAndContainers) {
    ip(&env.host, &["link", "add", "m0", "type", "dummy"]);
    ip(&env.host, &["link", "set", "m0", "up"]);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn containers_talk_in_every_mode() {
    require_rig();
    for (i, mode) in ["l2", "l3", "l3s"].into_iter().enumerate() {
        let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
        let (a, b) = (&env.containers[0], &env.containers[1]);
        host_master(&env);
        let ra = add("ipvlan", &env.host, a, &conf(mode, &format!("10.96.{i}.2/24")));
        add("ipvlan", &env.host, b, &conf(mode, &format!("10.96.{i}.3/24")));
        assert_eq!(ra["interfaces"][0]["name"], "eth0");
        let shown = a.ip_json(&["-d", "link", "show", "eth0"]);
        assert_eq!(shown[0]["linkinfo"]["info_kind"], "ipvlan");
        assert_eq!(shown[0]["linkinfo"]["info_data"]["mode"], mode, "{shown}");
        let to_b: SocketAddr = format!("10.96.{i}.3:7301").parse().unwrap();
        let _server = tcp_echo_server(b.netns(), to_b).unwrap();
        tcp_echo(a.netns(), to_b, mode.as_bytes(), Duration::from_secs(5)).unwrap();
    }
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn every_verb() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    host_master(&env);
    let data = tempfile::tempdir().unwrap();
    let mut c = json!({"cniVersion": "1.1.0", "name": "ipvlannet", "type": "ipvlan", "master": "m0", "mtu": 1280,
        "ipam": {"type": "host-local", "dataDir": data.path(), "ranges": [[{"subnet": "10.97.0.0/24"}]]}});
    let result = add("ipvlan", &env.host, a, &c);
    let eth0 = a.netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!((eth0.kind, eth0.mtu), (LinkKind::Ipvlan, 1280));
    assert_eq!(result["ips"][0]["address"], "10.97.0.2/24");
    ok(call("ipvlan", "STATUS", &env.host, None, &c).run());
    let mut with_prev = c.clone();
    with_prev["prevResult"] = result;
    check_and_delete_idempotently(&env, a, &with_prev);
    // GC releases what a lost attachment kept.
    add("ipvlan", &env.host, a, &c);
    c["cni.dev/valid-attachments"] = json!([]);
    ok(call("ipvlan", "GC", &env.host, None, &c).run());
    assert_eq!(
        std::fs::read_dir(data.path().join("ipvlannet"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
            .count(),
        0
    );
    let out = call("ipvlan", "VERSION", &env.host, None, &json!({"cniVersion": "1.1.0"})).run().json();
    assert_eq!(out["supportedVersions"].as_array().unwrap().len(), 7);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn chained_takes_master_and_addresses_from_the_prev_result() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    ip(a, &["link", "add", "up0", "type", "dummy"]);
    ip(a, &["link", "set", "up0", "up"]);
    let prev = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "up0", "sandbox": a.path()}],
        "ips": [{"address": "10.98.0.5/24", "interface": 0}]});
    let c = json!({"cniVersion": "1.1.0", "name": "ipvlannet", "type": "ipvlan", "prevResult": prev});
    let result = call("ipvlan", "ADD", &env.host, Some(a), &c).ifname("eth1").run().json();
    assert_eq!(result["interfaces"][0]["name"], "eth1");
    assert_eq!(result["ips"][0]["address"], "10.98.0.5/24");
    let shown = a.ip_json(&["-d", "addr", "show", "eth1"]);
    assert_eq!(shown[0]["link"], "up0");
    assert_eq!(shown[0]["addr_info"][0]["local"], "10.98.0.5", "{shown}");
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn bad_input_is_refused_and_leaves_nothing() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    host_master(&env);
    let data = tempfile::tempdir().unwrap();
    let host_local =
        json!({"type": "host-local", "dataDir": data.path(), "ranges": [[{"subnet": "10.99.0.0/24"}]]});
    let cases: [(Value, &str); 4] = [
        (json!({"master": "m0", "mode": "bridge", "ipam": host_local}), "mode"),
        (json!({"master": "nosuchlink", "ipam": host_local}), "master"),
        (json!({"master": "m0", "mtu": 9000, "ipam": host_local}), "mtu"),
        (json!({"master": "m0"}), "ipam"),
    ];
    let base = json!({"cniVersion": "1.0.0", "name": "ipvlannet", "type": "ipvlan"});
    assert_refused_leaving_nothing(&env, a, &base, &cases, data.path());
}
