//! Access ports, trunk ports and the default VLAN, proven with traffic and `bridge vlan`.

use crate::common::{add, call, ok};
use crate::{access, conf, echo, host_port, ip, no_echo, port_vlans, untagged, PREFIX};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use serde_json::json;

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn access_ports_are_isolated_and_a_trunk_carries_both() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 5).unwrap();
    let [a, b, x, c, t] = [0, 1, 2, 3, 4].map(|i| &env.containers[i]);
    // a, b and x share one subnet; only the VLAN keeps x apart.
    let ra = add("bridge", &env.host, a, &conf("bvi", "10.81.10.2/24", json!({"vlan": 10})));
    add("bridge", &env.host, b, &conf("bvi", "10.81.10.3/24", json!({"vlan": 10})));
    let rx = add("bridge", &env.host, x, &conf("bvi", "10.81.10.4/24", json!({"vlan": 20})));
    add("bridge", &env.host, c, &conf("bvi", "10.81.20.4/24", json!({"vlan": 20})));
    let trunk = json!({"vlanTrunk": [{"id": 10}, {"minID": 20, "maxID": 22}]});
    let rt = add("bridge", &env.host, t, &conf("bvi", "10.81.99.9/24", trunk.clone()));

    // Kernel state: filtering on; access ports untagged on their VLAN only (the default
    // VLAN 1 removed); the trunk tagged on 10 and 20-22.
    let detail = env.host.ip_json(&["-d", "link", "show", "bvi"]);
    assert_eq!(detail[0]["linkinfo"]["info_data"]["vlan_filtering"], 1, "{detail}");
    assert_eq!(port_vlans(&env.host, &host_port(&ra)), [(10, access())]);
    assert_eq!(port_vlans(&env.host, &host_port(&rx)), [(20, access())]);
    let none: Vec<String> = Vec::new();
    assert_eq!(
        port_vlans(&env.host, &host_port(&rt)),
        [(10, none.clone()), (20, none.clone()), (21, none.clone()), (22, none)]
    );

    // Traffic: within VLAN 10 yes, from VLAN 10 to VLAN 20 (same subnet) no.
    echo(a, b, "10.81.10.3:7301");
    no_echo(a, x, "10.81.10.4:7302");
    // The trunk's container tags with VLAN sub-interfaces and reaches both VLANs.
    for (vid, addr) in [("10", "10.81.10.9/24"), ("20", "10.81.20.9/24")] {
        let name = format!("eth0.{vid}");
        ip(t, &["link", "add", "link", "eth0", "name", &name, "type", "vlan", "id", vid]);
        ip(t, &["addr", "add", addr, "dev", &name]);
        ip(t, &["link", "set", &name, "up"]);
    }
    echo(t, a, "10.81.10.2:7303");
    echo(t, c, "10.81.20.4:7304");
    no_echo(t, x, "10.81.10.4:7305");

    // CHECK reads the port VLANs back, and notices a change.
    let mut check = conf("bvi", "10.81.10.2/24", json!({"vlan": 10}));
    check["prevResult"] = ra.clone();
    ok(call("bridge", "CHECK", &env.host, Some(a), &check).run());
    let mut check_t = conf("bvi", "10.81.99.9/24", trunk);
    check_t["prevResult"] = rt;
    ok(call("bridge", "CHECK", &env.host, Some(t), &check_t).run());
    let out = env.host.command("bridge").args(["vlan", "add", "vid", "1", "dev", &host_port(&ra)]).output();
    assert!(out.unwrap().status.success());
    let err = call("bridge", "CHECK", &env.host, Some(a), &check).run().error();
    assert!(err.msg.contains("VLANs"), "{}", err.msg);

    // DEL, twice.
    for _ in 0..2 {
        ok(call("bridge", "DEL", &env.host, Some(a), &check).run());
    }
    assert!(a.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn preserve_default_vlan_keeps_or_removes_vlan_1() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 5).unwrap();
    let [plain, kept, dropped, p, q] = [0, 1, 2, 3, 4].map(|i| &env.containers[i]);
    // A port without VLAN keys stays on the default VLAN 1.
    let r_plain = add("bridge", &env.host, plain, &conf("bvp", "10.84.0.2/24", json!({})));
    let trunk = |preserve: bool| json!({"vlanTrunk": [{"id": 60}], "preserveDefaultVlan": preserve});
    let r_kept = add("bridge", &env.host, kept, &conf("bvp", "10.84.0.3/24", trunk(true)));
    let r_dropped = add("bridge", &env.host, dropped, &conf("bvp", "10.84.0.4/24", trunk(false)));
    let r_p = add(
        "bridge",
        &env.host,
        p,
        &conf("bvp", "10.84.1.2/24", json!({"vlan": 50, "preserveDefaultVlan": true})),
    );
    let r_q = add("bridge", &env.host, q, &conf("bvp", "10.84.1.3/24", json!({"vlan": 50})));

    assert_eq!(port_vlans(&env.host, &host_port(&r_plain)), [(1, access())]);
    assert_eq!(port_vlans(&env.host, &host_port(&r_kept)), [(1, access()), (60, vec![])]);
    assert_eq!(port_vlans(&env.host, &host_port(&r_dropped)), [(60, vec![])]);
    // With `vlan`, the PVID moves to it; VLAN 1 stays (untagged) only when preserved.
    assert_eq!(port_vlans(&env.host, &host_port(&r_p)), [(1, untagged()), (50, access())]);
    assert_eq!(port_vlans(&env.host, &host_port(&r_q)), [(50, access())]);

    // Traffic on VLAN 1: the trunk that kept it talks to the plain port, the other not.
    echo(plain, kept, "10.84.0.3:7311");
    no_echo(plain, dropped, "10.84.0.4:7312");
    echo(p, q, "10.84.1.3:7313");

    // CHECK passes both ways.
    for (ns, address, keys, result) in [
        (kept, "10.84.0.3/24", trunk(true), &r_kept),
        (dropped, "10.84.0.4/24", trunk(false), &r_dropped),
        (p, "10.84.1.2/24", json!({"vlan": 50, "preserveDefaultVlan": true}), &r_p),
    ] {
        let mut c = conf("bvp", address, keys);
        c["prevResult"] = result.clone();
        ok(call("bridge", "CHECK", &env.host, Some(ns), &c).run());
    }
}
