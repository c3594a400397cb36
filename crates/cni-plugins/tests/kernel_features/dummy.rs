//! `dummy` in the kernel rig.

use crate::common::{add, call, ok};
use cni_net::netlink::{IpFamily, LinkKind};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use serde_json::{json, Value};
use std::path::Path;

const PREFIX: &str = "ckd";

fn conf(version: &str, data_dir: &Path) -> Value {
    json!({"cniVersion": version, "name": "dummynet", "type": "dummy",
        "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": "10.91.0.0/24"}]],
                 "routes": [{"dst": "10.92.0.0/16"}]}})
}

fn allocations(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("dummynet")) else { return Vec::new() };
    let mut ips: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("10."))
        .collect();
    ips.sort();
    ips
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn add_check_del() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let data = tempfile::tempdir().unwrap();
    let conf = conf("1.1.0", data.path());
    let result = add("dummy", &env.host, c, &conf);
    assert_eq!(result["interfaces"][0]["name"], "eth0");
    assert_eq!(result["interfaces"][0]["sandbox"], c.path().to_str().unwrap());
    assert_eq!(result["ips"][0]["address"], "10.91.0.2/24");
    assert_eq!(result["ips"][0]["interface"], 0);

    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    assert_eq!(eth0.kind, LinkKind::Dummy);
    assert!(eth0.up);
    assert_eq!(result["interfaces"][0]["mac"], eth0.mac.unwrap().to_string());
    let addrs = nl.addresses(Some(eth0.index), Some(IpFamily::V4)).unwrap();
    assert_eq!(addrs.iter().map(|a| a.address.to_string()).collect::<Vec<_>>(), ["10.91.0.2/24"]);
    let routes = nl.routes(IpFamily::V4, None).unwrap();
    assert!(routes.iter().any(|r| r.destination.to_string() == "10.92.0.0/16" && r.oif == Some(eth0.index)));

    let mut with_prev = conf.clone();
    with_prev["prevResult"] = result.clone();
    ok(call("dummy", "CHECK", &env.host, Some(c), &with_prev).run());
    ok(call("dummy", "DEL", &env.host, Some(c), &with_prev).run());
    assert!(nl.link_by_name("eth0").unwrap().is_none());
    assert!(allocations(data.path()).is_empty(), "DEL released the address");
    // CHECK now finds the link gone; DEL again, and DEL without a netns, succeed.
    assert_ne!(call("dummy", "CHECK", &env.host, Some(c), &with_prev).run().status, 0);
    ok(call("dummy", "DEL", &env.host, Some(c), &with_prev).run());
    ok(call("dummy", "DEL", &env.host, None, &with_prev).container_id("gone").ifname("eth0").run());
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn missing_ipam_is_code_7_and_creates_nothing() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let conf = json!({"cniVersion": "1.0.0", "name": "dummynet", "type": "dummy"});
    let err = call("dummy", "ADD", &env.host, Some(c), &conf).run().error();
    assert_eq!(err.code, 7);
    assert!(err.msg.contains("ipam"), "{}", err.msg);
    assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn a_taken_name_fails_and_releases_the_address() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let data = tempfile::tempdir().unwrap();
    add("dummy", &env.host, c, &conf("1.0.0", data.path()));
    let second = call("dummy", "ADD", &env.host, Some(c), &conf("1.0.0", data.path())).container_id("second");
    let err = second.run().error();
    assert!(err.msg.contains("eth0") && err.msg.contains("already exists"), "{}", err.msg);
    assert_eq!(allocations(data.path()), ["10.91.0.2"], "the failed ADD kept an address");
    // The first attachment's link is untouched.
    assert_eq!(c.netlink().unwrap().require_link("eth0").unwrap().kind, LinkKind::Dummy);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn gc_and_status_go_to_ipam() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = tempfile::tempdir().unwrap();
    add("dummy", &env.host, &env.containers[0], &conf("1.1.0", data.path()));
    assert_eq!(allocations(data.path()).len(), 1);
    let mut gc = conf("1.1.0", data.path());
    ok(call("dummy", "STATUS", &env.host, None, &gc).run());
    gc["cni.dev/valid-attachments"] = json!([]);
    ok(call("dummy", "GC", &env.host, None, &gc).run());
    assert!(allocations(data.path()).is_empty(), "GC released the stale allocation");
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn version_lists_every_spec_version() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 0).unwrap();
    let out = call("dummy", "VERSION", &env.host, None, &json!({"cniVersion": "1.1.0"})).run().json();
    assert_eq!(out["supportedVersions"].as_array().unwrap().len(), 7);
}
