//! Shared by the bandwidth tests: a container attached with `bridge` (static IPAM) in a
//! throwaway host namespace, and the bandwidth configuration chained after it.

use crate::common::{add, call};
use cni_net::netlink::tc::{TbfParams, TcHandle};
use cni_net::{Link, Netlink};
use cni_testkit::ns::TestNetns;
use serde_json::{json, Value};
use std::time::Duration;

pub const PREFIX: &str = "cnh";
pub const NETWORK: &str = "cnhnet";
pub const LATENCY: Duration = Duration::from_millis(25);

/// Attaches `container` to bridge `bridge` with `address` (gateway .1 of its /24); returns
/// bridge's result.
pub fn attach(version: &str, host: &TestNetns, container: &TestNetns, bridge: &str, address: &str) -> Value {
    let conf = json!({"cniVersion": version, "name": NETWORK, "type": "bridge", "bridge": bridge,
        "isGateway": true, "ipam": {"type": "static", "addresses": [{"address": address}]}});
    add("bridge", host, container, &conf)
}

/// A bandwidth configuration with `limits` (its keys) chained after `prev`.
pub fn conf(version: &str, limits: Value, prev: Option<&Value>) -> Value {
    let mut conf = json!({"cniVersion": version, "name": NETWORK, "type": "bandwidth"});
    for (key, value) in limits.as_object().unwrap() {
        conf[key] = value.clone();
    }
    if let Some(prev) = prev {
        conf["prevResult"] = prev.clone();
    }
    conf
}

/// The host veth named in a bridge result (interface 1).
pub fn host_veth(host: &TestNetns, result: &Value) -> Link {
    let name = result["interfaces"][1]["name"].as_str().expect("host veth in result");
    host.netlink().unwrap().require_link(name).unwrap()
}

pub fn tbf(rate_bits: u64, burst_bits: u64) -> TbfParams {
    TbfParams::shaping(rate_bits, burst_bits, LATENCY).unwrap()
}

/// The bandwidth IFB of a container (from the result it printed).
pub fn ifb_from_result(host: &TestNetns, result: &Value) -> Link {
    let interfaces = result["interfaces"].as_array().unwrap();
    let name = interfaces.last().unwrap()["name"].as_str().unwrap();
    assert!(name.starts_with("bwp"), "{result}");
    host.netlink().unwrap().require_link(name).unwrap()
}

/// IFB devices in `nl`'s namespace.
pub fn ifbs(nl: &mut Netlink) -> Vec<Link> {
    nl.links().unwrap().into_iter().filter(|l| l.kind == cni_net::netlink::LinkKind::Ifb).collect()
}

pub fn has_redirect(nl: &mut Netlink, veth: &Link) -> bool {
    nl.filters(veth.index, TcHandle::INGRESS_HOOK).unwrap().iter().any(|f| f.redirect_to.is_some())
}

/// `tc -j qdisc show` in the namespace (the oracle).
pub fn tc_qdiscs(ns: &TestNetns) -> Vec<Value> {
    let output = ns.command("tc").args(["-j", "qdisc", "show"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice::<Value>(&output.stdout).unwrap().as_array().unwrap().clone()
}

pub fn del(host: &TestNetns, container: &TestNetns, conf: &Value) -> cni_testkit::runner::PluginOutput {
    call("bandwidth", "DEL", host, Some(container), conf).run()
}
