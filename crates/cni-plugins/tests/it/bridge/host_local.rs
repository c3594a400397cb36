//! bridge + host-local together, as runtimes use them: concurrency, requested addresses,
//! exhaustion rollback, DEL without a namespace.

use crate::common;

use cni_net::netlink::LinkKind;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use common::{call, eventually, ok};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;

const PREFIX: &str = "cnc";

fn conf(bridge: &str, subnet: &str, data_dir: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hlnet", "type": "bridge", "bridge": bridge, "isGateway": true,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": data_dir}})
}

/// host-local's reservations of the test network.
fn reservations(data_dir: &Path) -> Vec<String> {
    cni_testkit::host_local::reservations(data_dir, "hlnet")
}

fn veths(host: &TestNetns) -> usize {
    host.netlink().unwrap().links().unwrap().iter().filter(|l| l.kind == LinkKind::Veth).count()
}

#[test]
fn fifty_concurrent_adds_on_one_bridge_then_fifty_dels() {
    let env = HostAndContainers::with_prefix(PREFIX, 50).unwrap();
    let data = tempfile::tempdir().unwrap();
    let conf = conf("cnc0", "10.60.0.0/24", data.path());
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = env
            .containers
            .iter()
            .map(|c| s.spawn(|| call("bridge", "ADD", &env.host, Some(c), &conf).run()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap().json()).collect()
    });
    let ips: HashSet<String> =
        results.iter().map(|r| r["ips"][0]["address"].as_str().unwrap().to_string()).collect();
    assert_eq!(ips.len(), 50, "an address was handed out twice");
    assert!(!ips.contains("10.60.0.1/24"), "the gateway was handed out");
    assert_eq!(reservations(data.path()).len(), 50);
    assert_eq!(veths(&env.host), 50);
    let bridges: Vec<_> = env
        .host
        .netlink()
        .unwrap()
        .links()
        .unwrap()
        .into_iter()
        .filter(|l| l.kind == LinkKind::Bridge)
        .collect();
    assert_eq!(bridges.len(), 1);

    std::thread::scope(|s| {
        for c in &env.containers {
            let conf = &conf;
            let host = &env.host;
            s.spawn(move || ok(call("bridge", "DEL", host, Some(c), conf).run()));
        }
    });
    eventually("veths left after DEL", || veths(&env.host) == 0);
    assert!(reservations(data.path()).is_empty(), "reservations left: {:?}", reservations(data.path()));
    let names: Vec<String> =
        env.host.netlink().unwrap().links().unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(
        names.iter().filter(|n| *n != "lo").collect::<Vec<_>>(),
        ["cnc0"],
        "only the bridge may remain"
    );
}

#[test]
fn podman_ip_arg_and_the_same_ip_twice_in_runtime_config() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let data = tempfile::tempdir().unwrap();
    let conf0 = conf("cnc1", "10.61.0.0/24", data.path());
    let r = call("bridge", "ADD", &env.host, Some(&env.containers[0]), &conf0)
        .args("IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.61.0.50")
        .run()
        .json();
    assert_eq!(r["ips"][0]["address"], "10.61.0.50/24");
    // A network reload: the same address again from CNI_ARGS and twice in runtimeConfig.
    ok(call("bridge", "DEL", &env.host, Some(&env.containers[0]), &conf0).run());
    let mut reload = conf0.clone();
    reload["runtimeConfig"] = json!({"ips": ["10.61.0.50", "10.61.0.50"]});
    let r = call("bridge", "ADD", &env.host, Some(&env.containers[0]), &reload)
        .args("IgnoreUnknown=1;IP=10.61.0.50;MAC=c2:aa:bb:cc:dd:ee")
        .run()
        .json();
    assert_eq!(r["ips"][0]["address"], "10.61.0.50/24");
    assert_eq!(r["interfaces"][2]["mac"], "c2:aa:bb:cc:dd:ee");
    // Another container asking for the same address is refused, and leaves nothing.
    let err = call("bridge", "ADD", &env.host, Some(&env.containers[1]), &conf0)
        .args("IP=10.61.0.50")
        .run()
        .error();
    assert!(err.msg.contains("10.61.0.50"), "{}", err.msg);
    assert_eq!(veths(&env.host), 1);
}

#[test]
fn exhausted_ipam_leaves_no_veth_and_no_reservation() {
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let data = tempfile::tempdir().unwrap();
    // 10.62.0.0/30: network, gateway .1, one usable address .2, broadcast.
    let conf = conf("cnc2", "10.62.0.0/30", data.path());
    ok(call("bridge", "ADD", &env.host, Some(&env.containers[0]), &conf).run());
    let err = call("bridge", "ADD", &env.host, Some(&env.containers[1]), &conf).run().error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("no IP addresses available"), "{}", err.msg);
    assert_eq!(veths(&env.host), 1, "the failed ADD left a veth");
    assert!(env.containers[1].netlink().unwrap().link_by_name("eth0").unwrap().is_none());
    assert_eq!(reservations(data.path()), ["10.62.0.2"]);
}

#[test]
fn del_without_netns_still_releases_the_address() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = tempfile::tempdir().unwrap();
    let conf = conf("cnc3", "10.63.0.0/24", data.path());
    ok(call("bridge", "ADD", &env.host, Some(&env.containers[0]), &conf).run());
    assert_eq!(reservations(data.path()).len(), 1);
    ok(call("bridge", "DEL", &env.host, Some(&env.containers[0]), &conf).unset("CNI_NETNS").run());
    assert!(reservations(data.path()).is_empty());
}

#[test]
fn a_bad_master_fails_add_and_leaves_no_veth_and_no_reservation() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = tempfile::tempdir().unwrap();
    // Something that is not a bridge already has the bridge's name.
    let mut nl = env.host.netlink().unwrap();
    let peer_ns = TestNetns::with_prefix(PREFIX).unwrap();
    nl.add_veth(&cni_net::netlink::VethSpec {
        link: cni_net::netlink::LinkSpec::new("cnc4"),
        peer: cni_net::netlink::LinkSpec::new("x").netns(peer_ns.netns()),
    })
    .unwrap();
    let conf = conf("cnc4", "10.64.0.0/24", data.path());
    let err = call("bridge", "ADD", &env.host, Some(&env.containers[0]), &conf).run().error();
    assert!(err.msg.contains("not a bridge"), "{}", err.msg);
    assert_eq!(veths(&env.host), 1, "only the impostor may exist");
    assert!(env.containers[0].netlink().unwrap().link_by_name("eth0").unwrap().is_none());
    assert!(reservations(data.path()).is_empty());
}

#[test]
fn an_ipam_error_is_logged_once() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut conf = conf("cnc3", "10.63.0.0/24", data.path());
    conf["ipam"]["ranges"][0][0]["rangeStart"] = json!("10.99.0.10");
    let out = call("bridge", "ADD", &env.host, Some(&env.containers[0]), &conf).run();
    let err = out.error();
    assert_eq!(err.code, 7, "{}", out.stdout);
    assert_eq!(out.stderr.matches(err.msg.as_str()).count(), 1, "stderr:\n{}", out.stderr);
}

#[test]
fn a_request_ipam_refuses_creates_no_link() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = tempfile::tempdir().unwrap();
    let good = conf("cnc4", "10.64.0.0/24", data.path());
    let mut bad_range = good.clone();
    bad_range["ipam"]["ranges"][0][0]["rangeStart"] = json!("10.64.0.200");
    bad_range["ipam"]["ranges"][0][0]["rangeEnd"] = json!("10.64.0.100");
    let mut bad_route = good.clone();
    bad_route["ipam"]["routes"] = json!([{"dst": "not-a-prefix"}]);
    let cases = [(bad_range, ""), (bad_route, ""), (good.clone(), "IP=10.99.0.5"), (good, "IP=")];
    for (conf, args) in &cases {
        let mut call = call("bridge", "ADD", &env.host, Some(&env.containers[0]), conf);
        if !args.is_empty() {
            call = call.args(args);
        }
        let out = call.run();
        assert!(!out.success(), "{conf} {args}: {}", out.stdout);
        let links = env.host.netlink().unwrap().links().unwrap();
        assert!(links.iter().all(|l| l.name == "lo"), "{conf} {args} left links: {links:?}");
        assert!(reservations(data.path()).is_empty(), "{conf} {args} left a reservation");
    }
}
