//! Every verb in every spec version with VLAN keys, and bad input in the rig.

use crate::common::{add, call, ok};
use crate::{access, conf, links_besides_lo, port_vlans, PREFIX};
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::HostAndContainers;
use serde_json::{json, Value};

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn every_verb_in_every_spec_version() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    let versions = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    for (i, version) in versions.into_iter().enumerate() {
        let mut c = conf(
            "bvv",
            &format!("10.87.{i}.2/24"),
            json!({"vlan": 80 + i, "vlanTrunk": [{"minID": 100, "maxID": 103}], "isGateway": true}),
        );
        c["cniVersion"] = json!(version);
        let r = add("bridge", &env.host, a, &c);
        assert!(r.to_string().contains(&format!("\"10.87.{i}.2/24\"")), "{version}: {r}");
        let mut expected = vec![(80 + i as u64, access())];
        expected.extend((100..=103).map(|id| (id, Vec::<String>::new())));
        // Results before 0.3.0 name no interfaces: the port is the container end's peer.
        let peer = a.netlink().unwrap().require_link("eth0").unwrap().link.expect("veth peer");
        let port = env.host.netlink().unwrap().link_by_index(peer).unwrap().expect("host end");
        let bridge = env.host.netlink().unwrap().require_link("bvv").unwrap();
        assert_eq!(port.master, Some(bridge.index), "{version}");
        assert_eq!(port_vlans(&env.host, &port.name), expected, "{version}");
        let gateway = format!("bvv.{}", 80 + i);
        assert!(env.host.netlink().unwrap().link_by_name(&gateway).unwrap().is_some(), "{version}");
        if !version.starts_with("0.1") && !version.starts_with("0.2") && !version.starts_with("0.3") {
            c["prevResult"] = r;
            ok(call("bridge", "CHECK", &env.host, Some(a), &c).run());
        }
        for _ in 0..2 {
            ok(call("bridge", "DEL", &env.host, Some(a), &c).run());
        }
        assert!(env.host.netlink().unwrap().link_by_name(&gateway).unwrap().is_none(), "{version}");
        if version == "1.1.0" {
            ok(call("bridge", "STATUS", &env.host, None, &c).run());
            ok(call("bridge", "GC", &env.host, None, &c).run());
        }
    }
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_bridge_vlan_tests"]
fn bad_vlan_input_is_refused_and_leaves_nothing() {
    require_rig();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    let data = tempfile::tempdir().unwrap();
    let cases: [(Value, &str); 5] = [
        (json!({"vlan": 4095}), "vlan"),
        (json!({"vlan": 0, "vlanTrunk": [{"id": 0}]}), "vlanTrunk[0].id"),
        (json!({"vlanTrunk": [{"minID": 1, "maxID": 4095}]}), "vlanTrunk[0].maxID"),
        (json!({"vlan": 12, "vlanTrunk": [{"minID": 10, "maxID": 20}]}), "overlaps vlan 12"),
        (json!({"vlan": 12, "isGateway": true, "bridge": "bv-long-bridge"}), "too long"),
    ];
    for (keys, named) in cases {
        let mut c = conf("bvx", "10.88.0.2/24", keys.clone());
        c["ipam"] =
            json!({"type": "host-local", "dataDir": data.path(), "ranges": [[{"subnet": "10.88.0.0/24"}]]});
        let err = call("bridge", "ADD", &env.host, Some(a), &c).run().error();
        assert_eq!(err.code, 7, "{keys}: {}", err.msg);
        assert!(err.msg.contains(named), "{keys}: {}", err.msg);
    }
    assert_eq!(links_besides_lo(&env.host), Vec::<String>::new());
    assert_eq!(links_besides_lo(a), Vec::<String>::new());
    let leftovers = std::fs::read_dir(data.path().join("bvnet")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(leftovers, 0, "IPAM was called for a refused config");
}
