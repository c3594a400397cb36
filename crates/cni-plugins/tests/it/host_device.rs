//! `host-device` on the real kernel: host interfaces (a veth end standing in for a NIC, and
//! a macvlan) moved into a container and back with name, alias, MTU and state restored.

use crate::common;

use cni_net::netlink::{AddressFlags, IpFamily, LinkKind, LinkSpec, MacvlanMode, VethSpec};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, ok};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const PREFIX: &str = "cnh";

/// A host with NIC stand-in `nic0` (MTU 1400, alias "uplink", up) whose peer `lan0`
/// (10.98.0.254/24) is in `lan`.
fn host_with_nic(env: &HostAndContainers, lan: &TestNetns) -> cni_net::Link {
    let mut nl = env.host.netlink().unwrap();
    nl.add_veth(&VethSpec {
        link: LinkSpec::new("nic0").mtu(1400),
        peer: LinkSpec::new("lan0").netns(lan.netns()),
    })
    .unwrap();
    let nic = nl.require_link("nic0").unwrap();
    nl.set_link_alias(nic.index, "uplink").unwrap();
    nl.set_link_up(nic.index).unwrap();
    let mut lan_nl = lan.netlink().unwrap();
    let lan0 = lan_nl.require_link("lan0").unwrap();
    lan_nl.add_address(lan0.index, "10.98.0.254/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    lan_nl.set_link_up(lan0.index).unwrap();
    nl.require_link("nic0").unwrap()
}

fn conf(version: &str, data_dir: &Path, selector: Value) -> Value {
    let mut conf = json!({"cniVersion": version, "name": "hdnet", "type": "host-device", "dataDir": data_dir,
        "ipam": {"type": "static", "addresses": [{"address": "10.98.0.2/24"}]}});
    for (k, v) in selector.as_object().unwrap() {
        conf[k] = v.clone();
    }
    conf
}

#[test]
fn a_nic_moves_in_carries_traffic_and_comes_back_as_it_was() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    let nic = host_with_nic(&env, &lan);
    let c = &env.containers[0];
    let state = tempfile::tempdir().unwrap();
    let mut conf = conf("1.1.0", state.path(), json!({"device": "nic0"}));
    let r = add("host-device", &env.host, c, &conf);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][0]["mac"], nic.mac.unwrap().to_string());
    assert_eq!(r["ips"][0], json!({"interface": 0, "address": "10.98.0.2/24"}));

    let mut host = env.host.netlink().unwrap();
    assert!(host.link_by_name("nic0").unwrap().is_none());
    let mut cont = c.netlink().unwrap();
    let eth0 = cont.require_link("eth0").unwrap();
    assert_eq!((eth0.alias.as_deref(), eth0.up, eth0.mtu), (Some("nic0"), true, 1400));
    let server = tcp_echo_server(lan.netns(), "10.98.0.254:7301".parse::<SocketAddr>().unwrap()).unwrap();
    tcp_echo(c.netns(), server.local_addr(), b"through the moved nic", Duration::from_secs(5)).unwrap();

    conf["prevResult"] = r;
    ok(call("host-device", "CHECK", &env.host, Some(c), &conf).run());
    // The container changes what it may; DEL still puts the NIC back as it found it.
    cont.set_link_mtu(eth0.index, 1300).unwrap();
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    let back = host.require_link("nic0").unwrap();
    assert_eq!((back.alias.as_deref(), back.mtu, back.up, back.mac), (Some("uplink"), 1400, true, nic.mac));
    assert!(cont.link_by_name("eth0").unwrap().is_none());
    assert!(std::fs::read_dir(state.path().join("hdnet")).unwrap().next().is_none(), "state file left");
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).unset("CNI_NETNS").run());
}

#[test]
fn a_macvlan_selected_by_mac_goes_in_and_a_down_device_comes_back_down() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let mut host = env.host.netlink().unwrap();
    let nic = host.require_link("nic0").unwrap();
    let spec = cni_net::netlink::MacvlanSpec {
        link: LinkSpec::new("mv0").mac("c2:98:00:00:00:05".parse().unwrap()),
        parent_index: nic.index,
        mode: MacvlanMode::Bridge,
        bc_queue_len: None,
    };
    let mv0 = host.add_macvlan(&spec).unwrap().unwrap();
    assert!(!mv0.up);
    let c = &env.containers[0];
    let state = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", state.path(), json!({"hwaddr": "c2:98:00:00:00:05"}));
    add("host-device", &env.host, c, &conf);
    let eth0 = c.netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!((eth0.kind.clone(), eth0.alias.as_deref()), (LinkKind::Macvlan, Some("mv0")));
    let server = tcp_echo_server(lan.netns(), "10.98.0.254:7302".parse::<SocketAddr>().unwrap()).unwrap();
    tcp_echo(c.netns(), server.local_addr(), b"macvlan moved in", Duration::from_secs(5)).unwrap();
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    let back = host.require_link("mv0").unwrap();
    assert_eq!((back.up, back.alias.as_deref().unwrap_or("")), (false, ""));
}

#[test]
fn the_original_name_taken_in_the_container_does_not_matter_but_ifname_taken_does() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let c = &env.containers[0];
    let mut cont = c.netlink().unwrap();
    cont.add_veth(&VethSpec { link: LinkSpec::new("nic0"), peer: LinkSpec::new("eth9") }).unwrap();
    let state = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", state.path(), json!({"device": "nic0"}));
    add("host-device", &env.host, c, &conf);
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    assert!(env.host.netlink().unwrap().link_by_name("nic0").unwrap().is_some());

    // CNI_IFNAME taken: refused, the NIC is back on the host, IPAM released, no state.
    let err = call("host-device", "ADD", &env.host, Some(c), &conf).ifname("eth9").run().error();
    assert!(err.msg.contains("eth9") && err.msg.contains("already"), "{}", err.msg);
    let back = env.host.netlink().unwrap().require_link("nic0").unwrap();
    assert_eq!((back.alias.as_deref(), back.up, back.mtu), (Some("uplink"), true, 1400));
    assert!(state.path().join("hdnet").read_dir().map(|mut d| d.next().is_none()).unwrap_or(true));
}

#[test]
fn selectors_must_be_exactly_one_and_must_find_something() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let c = &env.containers[0];
    let state = tempfile::tempdir().unwrap();
    for (selector, names) in [
        (json!({}), "exactly one"),
        (json!({"device": "nic0", "hwaddr": "c2:00:00:00:00:01"}), "device, hwaddr"),
        (json!({"device": "nic0", "runtimeConfig": {"deviceID": "0000:00:01.0"}}), "pciBusID"),
        (json!({"device": "nosuch0"}), "nosuch0"),
        (json!({"hwaddr": "c2:00:00:00:00:01"}), "c2:00:00:00:00:01"),
        (json!({"hwaddr": "nope"}), "hwaddr"),
        (json!({"kernelpath": "relative/path"}), "/sys/devices/"),
        (json!({"kernelpath": "/sys/devices/virtual/net/nosuch"}), "no network device"),
        (json!({"pciBusID": "0000:ff:1f.7"}), "0000:ff:1f.7"),
    ] {
        let err =
            call("host-device", "ADD", &env.host, Some(c), &conf("1.0.0", state.path(), selector.clone()))
                .run()
                .error();
        assert_eq!(err.code, 7, "{selector}: {}", err.msg);
        assert!(err.msg.contains(names), "{selector}: {}", err.msg);
    }
    assert!(env.host.netlink().unwrap().link_by_name("nic0").unwrap().is_some());
    assert_eq!(c.netlink().unwrap().links().unwrap().len(), 1);
}

#[test]
fn kernelpath_selects_a_virtual_device_by_its_sysfs_path() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let c = &env.containers[0];
    // sysfs shows the plugin's own namespace: the test host's, as the plugin runs there.
    let state = tempfile::tempdir().unwrap();
    let mut conf = conf("1.0.0", state.path(), json!({"kernelpath": "/sys/devices/virtual/net/nic0"}));
    conf.as_object_mut().unwrap().remove("ipam");
    let out = call("host-device", "ADD", &env.host, Some(c), &conf).run();
    if out.success() {
        assert_eq!(c.netlink().unwrap().require_link("eth0").unwrap().alias.as_deref(), Some("nic0"));
        ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    } else {
        // /sys mounted for the machine's namespace shows no nic0: the same code-7 answer.
        assert_eq!(out.error().code, 7, "{}", out.stdout);
    }
}

#[test]
fn del_after_the_container_is_gone_frees_the_address_and_gc_forgets_the_rest() {
    let mut env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let mut host = env.host.netlink().unwrap();
    host.add_veth(&VethSpec { link: LinkSpec::new("nic1"), peer: LinkSpec::new("nic1p") }).unwrap();
    let ipam_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let conf = |device: &str| {
        let mut conf = conf("1.1.0", state.path(), json!({"device": device}));
        conf["ipam"] = json!({"type": "host-local", "dataDir": ipam_dir.path(),
            "ranges": [[{"subnet": "10.98.0.0/24", "rangeStart": "10.98.0.10"}]]});
        conf
    };
    add("host-device", &env.host, &env.containers[0], &conf("nic0"));
    add("host-device", &env.host, &env.containers[1], &conf("nic1"));
    let reservations = || {
        std::fs::read_dir(ipam_dir.path().join("hdnet"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<std::net::IpAddr>().is_ok())
            .count()
    };
    assert_eq!(reservations(), 2);
    let gone = env.containers.remove(0);
    let (id, path) = (gone.name().to_string(), gone.path().to_path_buf());
    drop(gone);
    ok(call("host-device", "DEL", &env.host, None, &conf("nic0"))
        .container_id(&id)
        .netns(&path)
        .ifname("eth0")
        .run());
    assert_eq!(reservations(), 1);

    let mut gc = conf("nic1");
    gc["cni.dev/valid-attachments"] = json!([]);
    ok(call("host-device", "GC", &env.host, None, &gc).run());
    assert_eq!(reservations(), 0);
    assert!(std::fs::read_dir(state.path().join("hdnet")).unwrap().next().is_none());
    ok(call("host-device", "STATUS", &env.host, None, &gc).run());
}

#[test]
fn every_verb_in_every_version_family() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let c = &env.containers[0];
    let state = tempfile::tempdir().unwrap();
    for version in ["0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let mut conf = conf(version, state.path(), json!({"device": "nic0"}));
        let r = add("host-device", &env.host, c, &conf);
        assert_eq!(r["cniVersion"], version);
        match version {
            "0.1.0" | "0.2.0" => assert_eq!(r["ip4"]["ip"], "10.98.0.2/24"),
            "0.3.1" | "0.4.0" => assert_eq!(r["ips"][0]["version"], "4"),
            _ => assert!(r["ips"][0].get("version").is_none()),
        }
        conf["prevResult"] = r;
        let check = call("host-device", "CHECK", &env.host, Some(c), &conf).run();
        if ["0.1.0", "0.2.0", "0.3.1"].contains(&version) {
            assert_eq!(check.error().code, 1, "CHECK at {version}");
        } else {
            ok(check);
        }
        for verb in ["GC", "STATUS"] {
            let out = call("host-device", verb, &env.host, None, &conf).run();
            if version == "1.1.0" {
                ok(out);
            } else {
                assert_eq!(out.error().code, 1, "{verb} at {version}");
            }
        }
        ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
        assert!(env.host.netlink().unwrap().link_by_name("nic0").unwrap().is_some(), "{version}");
    }
    let addrs = lan.netlink().unwrap().addresses(None, Some(IpFamily::V4)).unwrap();
    assert!(addrs.iter().any(|a| a.address.to_string() == "10.98.0.254/24"));
}

#[test]
fn drop_in_for_the_go_plugin_each_moves_back_what_the_other_moved_in() {
    let go = Path::new("/usr/lib/cni/host-device");
    assert!(go.exists(), "{} is missing: apt-get install -y containernetworking-plugins", go.display());
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    host_with_nic(&env, &lan);
    let c = &env.containers[0];
    let state = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", state.path(), json!({"device": "nic0"}));
    let go_call = |verb: &str| {
        cni_testkit::runner::PluginCall::new(go, verb)
            .in_namespace(env.host.path())
            .cni_path(&common::plugin_dir().display().to_string())
            .config(&conf)
            .netns(c.path())
            .container_id(c.name())
            .run()
    };
    // Go ADD, our DEL: the name comes back from the alias.
    ok(go_call("ADD"));
    ok(call("host-device", "DEL", &env.host, Some(c), &conf).run());
    assert!(env.host.netlink().unwrap().link_by_name("nic0").unwrap().is_some());
    // Our ADD, Go DEL.
    add("host-device", &env.host, c, &conf);
    ok(go_call("DEL"));
    let back = env.host.netlink().unwrap().require_link("nic0").unwrap();
    assert_eq!(back.mtu, 1400);
    assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}
