//! A test binary of its own: its one host test runs this binary's ignored tests in a VM.
//!
//! The bridge plugin's VLAN keys (`vlan`, `vlanTrunk`, `preserveDefaultVlan`) under a
//! kernel with bridge VLAN filtering: Debian's, in QEMU (`tools/kernel-rig`). This
//! machine's kernel has none (`it/bridge` tests the clean refusal there).
//!
//! Every test below except `kernel_rig_runs_the_bridge_vlan_tests` is ignored on the host:
//! that one boots a single VM and runs this binary inside it with `--ignored`, so the
//! group costs one VM, and a rig that cannot start fails it loudly. One test by hand (the
//! binary is printed by `cargo test --no-run`):
//!
//!     tools/kernel-rig -- target/debug/deps/kernel_bridge_vlan-<hash> --ignored --exact isolation::access_ports_are_isolated_and_a_trunk_carries_both

// Shared with the `it` binary, of which this one uses a part.
#[path = "it/common/mod.rs"]
#[allow(dead_code)]
mod common;

#[path = "kernel_bridge_vlan/firewall.rs"]
mod firewall;
#[path = "kernel_bridge_vlan/gateway.rs"]
mod gateway;
#[path = "kernel_bridge_vlan/isolation.rs"]
mod isolation;
#[path = "kernel_bridge_vlan/verbs.rs"]
mod verbs;

use cni_testkit::ns::TestNetns;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// Namespace prefix of this binary's tests.
const PREFIX: &str = "bv";

#[test]
fn kernel_rig_runs_the_bridge_vlan_tests() {
    // The guest sees the host's file system read-only: install the plugin links now.
    common::plugin_dir();
    cni_testkit::kernel_rig::run_ignored_tests_in_rig();
}

/// A bridge config with static addresses (no gateway unless `extra` says `isGateway`).
fn conf(bridge: &str, address: &str, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.1.0", "name": "bvnet", "type": "bridge", "bridge": bridge,
        "ipam": {"type": "static", "addresses": [{"address": address}]}});
    c.as_object_mut().unwrap().extend(extra.as_object().expect("extra keys are an object").clone());
    c
}

/// Runs `ip args` in `ns` (test set-up; plugins themselves never spawn `ip`).
fn ip(ns: &TestNetns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The kernel's view of a port's VLANs (`bridge -j vlan show dev PORT`): each id (ranges
/// expanded) with its flags, e.g. `(10, ["PVID", "Egress Untagged"])`.
fn port_vlans(host: &TestNetns, port: &str) -> Vec<(u64, Vec<String>)> {
    let out = host.command("bridge").args(["-j", "vlan", "show", "dev", port]).output().expect("run bridge");
    assert!(out.status.success(), "bridge vlan show {port}: {}", String::from_utf8_lossy(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(Vec::new()));
    let mut vlans = Vec::new();
    for entry in shown.as_array().unwrap().iter().filter(|e| e["ifname"] == port) {
        for v in entry["vlans"].as_array().into_iter().flatten() {
            let first = v["vlan"].as_u64().unwrap();
            let last = v["vlanEnd"].as_u64().unwrap_or(first);
            let flags: Vec<String> = v["flags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            vlans.extend((first..=last).map(|id| (id, flags.clone())));
        }
    }
    vlans
}

/// Flags as `bridge` prints them.
fn access() -> Vec<String> {
    vec!["PVID".into(), "Egress Untagged".into()]
}

fn untagged() -> Vec<String> {
    vec!["Egress Untagged".into()]
}

/// The host end of an ADD's result.
fn host_port(result: &Value) -> String {
    result["interfaces"][1]["name"].as_str().expect("host veth in the result").to_string()
}

/// A TCP echo from `from` to `to` at `addr` must work.
fn echo(from: &TestNetns, to: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    tcp_echo(from.netns(), addr, b"over the VLAN", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("no echo from {addr}: {e}"));
}

/// A TCP echo from `from` to `to` at `addr` must fail.
fn no_echo(from: &TestNetns, to: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    assert!(
        tcp_echo(from.netns(), addr, b"across VLANs", Duration::from_secs(2)).is_err(),
        "{addr} was reached"
    );
}

/// Names of the links in `ns` besides `lo`.
fn links_besides_lo(ns: &TestNetns) -> Vec<String> {
    let links = ns.netlink().unwrap().links().unwrap();
    links.into_iter().map(|l| l.name).filter(|n| n != "lo").collect()
}
