//! The access VLAN's gateway on `<bridge>.<vlan>`: reachable, and gone with the VLAN's
//! last port (DEL, a failed ADD, or GC after a port vanished without DEL).

use crate::common::{add, call, ok};
use crate::{conf, echo, host_port, ip, PREFIX};
use cni_net::netlink::{IpFamily, LinkKind};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use serde_json::{json, Value};

fn gw_conf(address: &str, vlan: u16) -> Value {
    let mut c = conf("bvg", address, json!({"vlan": vlan, "isGateway": true}));
    c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
    c
}

/// The gateway link of `vlan` on `bvg`: kind, VLAN id and parent checked, its addresses.
fn gateway(host: &TestNetns, vlan: u16) -> Option<Vec<String>> {
    let mut nl = host.netlink().unwrap();
    let link = nl.link_by_name(&format!("bvg.{vlan}")).unwrap()?;
    let bridge = nl.require_link("bvg").unwrap();
    assert_eq!((link.kind, link.link), (LinkKind::Vlan, Some(bridge.index)));
    let detail = host.ip_json(&["-d", "link", "show", &link.name]);
    assert_eq!(detail[0]["linkinfo"]["info_data"]["id"], vlan, "{detail}");
    let addresses = nl.addresses(Some(link.index), Some(IpFamily::V4)).unwrap();
    Some(addresses.iter().map(|a| a.address.to_string()).collect())
}

/// Whether the bridge itself ("self") carries `vlan`.
fn bridge_self_carries(host: &TestNetns, vlan: u64) -> bool {
    crate::port_vlans(host, "bvg").iter().any(|(id, _)| *id == vlan)
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn vlan_gateway_is_reachable_and_goes_with_the_last_port() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let (a, b, c) = (&env.containers[0], &env.containers[1], &env.containers[2]);
    let ra = add("bridge", &env.host, a, &gw_conf("10.82.0.2/24", 30));
    add("bridge", &env.host, b, &gw_conf("10.82.0.3/24", 30));
    add("bridge", &env.host, c, &gw_conf("10.83.0.2/24", 40));

    // Result: bridge, host veth, container veth, then the gateway link (as the reference).
    assert_eq!(ra["interfaces"].as_array().unwrap().len(), 4, "{ra}");
    assert_eq!(ra["interfaces"][3]["name"], "bvg.30");
    assert_eq!(ra["ips"][0]["gateway"], "10.82.0.1");
    assert_eq!(gateway(&env.host, 30).unwrap(), ["10.82.0.1/24"]);
    assert_eq!(gateway(&env.host, 40).unwrap(), ["10.83.0.1/24"]);
    assert!(bridge_self_carries(&env.host, 30) && bridge_self_carries(&env.host, 40));
    // The bridge itself has no address: the gateways are on the VLAN links.
    let bridge = env.host.netlink().unwrap().require_link("bvg").unwrap();
    assert!(env
        .host
        .netlink()
        .unwrap()
        .addresses(Some(bridge.index), Some(IpFamily::V4))
        .unwrap()
        .is_empty());

    // Each container reaches its VLAN's gateway, and through the host the other VLAN.
    echo(a, &env.host, "10.82.0.1:7321");
    echo(c, &env.host, "10.83.0.1:7322");
    echo(a, c, "10.83.0.2:7323");
    let mut check = gw_conf("10.82.0.2/24", 30);
    check["prevResult"] = ra;
    ok(call("bridge", "CHECK", &env.host, Some(a), &check).run());

    // The first DEL on VLAN 30 keeps the gateway (b is still on it), the last removes it.
    ok(call("bridge", "DEL", &env.host, Some(a), &gw_conf("10.82.0.2/24", 30)).run());
    assert!(gateway(&env.host, 30).is_some());
    echo(b, &env.host, "10.82.0.1:7324");
    ok(call("bridge", "DEL", &env.host, Some(b), &gw_conf("10.82.0.3/24", 30)).run());
    assert_eq!(gateway(&env.host, 30), None, "the gateway of VLAN 30 outlived its last port");
    assert!(!bridge_self_carries(&env.host, 30));
    // VLAN 40 is untouched; a repeated DEL is fine.
    assert!(gateway(&env.host, 40).is_some());
    ok(call("bridge", "DEL", &env.host, Some(b), &gw_conf("10.82.0.3/24", 30)).run());

    // A new ADD on VLAN 30 brings it back.
    add("bridge", &env.host, a, &gw_conf("10.82.0.2/24", 30));
    echo(a, &env.host, "10.82.0.1:7325");
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn gc_removes_a_gateway_whose_ports_vanished_and_a_failed_add_leaves_none() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let ra = add("bridge", &env.host, a, &gw_conf("10.86.0.2/24", 31));
    assert!(gateway(&env.host, 31).is_some());
    // The port vanishes without a DEL (a crashed runtime): GC notices nobody uses it.
    ip(&env.host, &["link", "del", &host_port(&ra)]);
    let mut gc = gw_conf("10.86.0.2/24", 31);
    gc["cni.dev/valid-attachments"] = json!([]);
    ok(call("bridge", "GC", &env.host, None, &gc).run());
    assert_eq!(gateway(&env.host, 31), None);
    ok(call("bridge", "STATUS", &env.host, None, &gw_conf("10.86.0.2/24", 31)).run());

    // Something else holds the gateway's name: the ADD fails after its port was made,
    // and rolls back (no veth, nothing in the container, VLAN 32 not left on the bridge),
    // leaving the foreign link alone.
    ip(&env.host, &["link", "add", "bvg.32", "type", "dummy"]);
    let err = call("bridge", "ADD", &env.host, Some(b), &gw_conf("10.86.1.2/24", 32)).run().error();
    assert!(err.msg.contains("bvg.32"), "{}", err.msg);
    assert_eq!(crate::links_besides_lo(b), Vec::<String>::new());
    let mut host_links = crate::links_besides_lo(&env.host);
    host_links.sort();
    assert_eq!(host_links, ["bvg", "bvg.32"]);
    assert!(!bridge_self_carries(&env.host, 32));
    let dummy = env.host.netlink().unwrap().require_link("bvg.32").unwrap();
    assert_eq!(dummy.kind, LinkKind::Dummy);
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn concurrent_adds_and_dels_on_one_vlan_keep_the_gateway_while_a_port_remains() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 6).unwrap();
    let c = &env.containers;
    let address = |i: usize| format!("10.89.0.{}/24", i + 2);
    // Three join at once; then two leave while two others join; then all leave at once.
    let run = |command: &'static str, which: &[usize]| {
        std::thread::scope(|scope| {
            for &i in which {
                let (host, ns, conf) = (&env.host, &c[i], gw_conf(&address(i), 33));
                scope.spawn(move || ok(call("bridge", command, host, Some(ns), &conf).run()));
            }
        })
    };
    run("ADD", &[0, 1, 2]);
    assert_eq!(gateway(&env.host, 33).unwrap(), ["10.89.0.1/24"]);
    std::thread::scope(|scope| {
        scope.spawn(|| run("DEL", &[0, 1, 2]));
        scope.spawn(|| run("ADD", &[3, 4]));
    });
    assert_eq!(
        gateway(&env.host, 33).unwrap(),
        ["10.89.0.1/24"],
        "the gateway went while ports 3 and 4 use it"
    );
    echo(&c[3], &env.host, "10.89.0.1:7341");
    run("DEL", &[3, 4]);
    assert_eq!(gateway(&env.host, 33), None);
    assert!(!bridge_self_carries(&env.host, 33));
}
