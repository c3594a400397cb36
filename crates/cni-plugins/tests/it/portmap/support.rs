//! Shared by the portmap tests: reading the ruleset back, and requests with a
//! made-up prevResult (portmap only needs the container's addresses).

use cni_testkit::ns::TestNetns;
use serde_json::{json, Value};

/// Attachment chains and map elements in the ruleset.
pub fn per_container_parts(ns: &TestNetns) -> (usize, usize) {
    let objects = ns.nft_json();
    let chains =
        objects.iter().filter(|o| o["chain"]["name"].as_str().is_some_and(|n| n.starts_with("cni-"))).count();
    let elements = objects.iter().filter_map(|o| o["map"]["elem"].as_array()).map(Vec::len).sum();
    (chains, elements)
}

pub fn prev_result(ctr: &TestNetns, address: &str) -> Value {
    json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": ctr.path().display().to_string()}],
        "ips": [{"address": address, "interface": 0}]})
}

pub fn conf(version: &str, host_port: u16, prev: Option<Value>) -> Value {
    let mut c = json!({"cniVersion": version, "name": "pmscale", "type": "portmap",
        "runtimeConfig": {"portMappings": [{"hostPort": host_port, "containerPort": 80}]}});
    if let Some(prev) = prev {
        c["prevResult"] = prev;
    }
    c
}
