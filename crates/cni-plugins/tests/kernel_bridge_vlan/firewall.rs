//! `ipMasq` and `macspoofchk` on a VLAN port.

use crate::common::{add, call, ok};
use crate::{conf, echo, ip, no_echo, PREFIX};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use serde_json::{json, Value};

fn fw_conf(address: &str, masq: bool) -> Value {
    let mut c =
        conf("bvf", address, json!({"vlan": 70, "isGateway": true, "ipMasq": masq, "macspoofchk": true}));
    c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
    c
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn masquerade_and_mac_spoof_check_work_on_a_vlan_port() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let (a, z, outside) = (&env.containers[0], &env.containers[1], &env.containers[2]);
    // "outside": a network the host routes to, with no route back to the containers.
    ip(&env.host, &["link", "add", "bvout", "type", "veth", "peer", "name", "eth9", "netns", outside.name()]);
    ip(&env.host, &["addr", "add", "192.0.2.1/24", "dev", "bvout"]);
    ip(&env.host, &["link", "set", "bvout", "up"]);
    ip(outside, &["addr", "add", "192.0.2.2/24", "dev", "eth9"]);
    ip(outside, &["link", "set", "eth9", "up"]);

    let ra = add("bridge", &env.host, a, &fw_conf("10.85.0.2/24", true));
    add("bridge", &env.host, z, &fw_conf("10.85.0.3/24", false));

    // Masqueraded, a's traffic comes back; z's (same VLAN, no ipMasq) cannot.
    echo(a, outside, "192.0.2.2:7331");
    no_echo(z, outside, "192.0.2.2:7332");
    let ruleset = env.host.nft_text();
    assert!(ruleset.contains("masquerade") && ruleset.contains("10.85.0.2"), "{ruleset}");

    // The spoof check: a's own MAC passes, another is dropped at the bridge.
    echo(a, &env.host, "10.85.0.1:7333");
    ip(a, &["link", "set", "eth0", "address", "02:00:00:00:bb:99"]);
    ip(&env.host, &["neigh", "flush", "dev", "bvf.70"]);
    no_echo(a, &env.host, "10.85.0.1:7334");
    let mac = ra["interfaces"][2]["mac"].as_str().unwrap().to_string();
    ip(a, &["link", "set", "eth0", "address", &mac]);
    echo(a, &env.host, "10.85.0.1:7335");

    let mut check = fw_conf("10.85.0.2/24", true);
    check["prevResult"] = ra.clone();
    ok(call("bridge", "CHECK", &env.host, Some(a), &check).run());
    ok(call("bridge", "DEL", &env.host, Some(a), &check).run());
    let ruleset = env.host.nft_text();
    assert!(!ruleset.contains("10.85.0.2"), "a's rules outlived its DEL: {ruleset}");
    // z still holds VLAN 70, so its gateway stays.
    assert!(env.host.netlink().unwrap().link_by_name("bvf.70").unwrap().is_some());
}
