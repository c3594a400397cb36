//! Links on the real kernel, checked by netlink and by `ip -j` inside the namespace. Needs root.

use std::time::{Duration, Instant};

use cni_net::netlink::{
    create_tun, BridgeOptions, LinkCondition, LinkKind, LinkSpec, MacvlanMode, MacvlanSpec, TunSpec, TunType,
    VethSpec, VxlanSpec,
};
use cni_net::MacAddr;
use cni_testkit::ns::TestNetns;
use serde_json::Value;

fn ip_link(ns: &TestNetns, name: &str) -> Value {
    let links = ns.ip_json(&["-d", "link", "show", "dev", name]);
    links[0].clone()
}

/// The veth pair `cntv0`/`cntv0p`, both ends in `nl`'s namespace; returns `cntv0`.
fn add_veth_pair(nl: &mut cni_net::Netlink) -> cni_net::Link {
    nl.add_veth(&VethSpec { link: LinkSpec::new("cntv0"), peer: LinkSpec::new("cntv0p") }).unwrap().unwrap()
}

#[test]
fn veth_peer_is_created_directly_in_the_other_namespace() {
    let host = TestNetns::new().unwrap();
    let container = TestNetns::new().unwrap();
    let mut host_nl = host.netlink().unwrap();
    let mut container_nl = container.netlink().unwrap();

    let host_mac: MacAddr = "02:00:00:00:0a:01".parse().unwrap();
    let peer_mac: MacAddr = "02:00:00:00:0a:02".parse().unwrap();
    let spec = VethSpec {
        link: LinkSpec::new("cntv0").mtu(1400).mac(host_mac),
        peer: LinkSpec::new("eth0").mtu(1400).mac(peer_mac).netns(container.netns()),
    };
    let started = Instant::now();
    let host_end = host_nl.add_veth(&spec).unwrap().expect("host end is local");
    let elapsed = started.elapsed();
    eprintln!("veth with peer created in target namespace: {elapsed:?}");

    // Moving a device afterwards costs far more; measured for comparison.
    let moved_spec = VethSpec { link: LinkSpec::new("cntv1"), peer: LinkSpec::new("cntv1p") };
    host_nl.add_veth(&moved_spec).unwrap();
    let moved_peer = host_nl.require_link("cntv1p").unwrap();
    let started = Instant::now();
    host_nl.set_link_netns(moved_peer.index, container.netns()).unwrap();
    eprintln!("moving an existing veth end into a namespace: {:?}", started.elapsed());
    assert!(host_nl.link_by_name("cntv1p").unwrap().is_none());
    assert!(container_nl.link_by_name("cntv1p").unwrap().is_some());

    assert_eq!(host_end.kind, LinkKind::Veth);
    assert_eq!(host_end.mtu, 1400);
    assert_eq!(host_end.mac, Some(host_mac));
    assert!(host_end.link_netnsid.is_some(), "peer lives in another namespace");

    let peer = container_nl.require_link("eth0").unwrap();
    assert_eq!(peer.mac, Some(peer_mac));
    assert_eq!(host_end.link, Some(peer.index), "IFLA_LINK names the peer");
    assert!(host_nl.link_by_name("eth0").unwrap().is_none());

    // Oracle: ip sees the same thing.
    let oracle = ip_link(&container, "eth0");
    assert_eq!(oracle["mtu"], 1400);
    assert_eq!(oracle["address"], peer_mac.to_string());
    assert_eq!(oracle["linkinfo"]["info_kind"], "veth");

    // Bring both ends up; carrier arrives once both are up.
    host_nl.set_link_up(host_end.index).unwrap();
    container_nl.set_link_up(peer.index).unwrap();
    let ready =
        container_nl.wait_for_link(peer.index, LinkCondition::Carrier, Duration::from_secs(5)).unwrap();
    assert!(ready.up && ready.carrier);

    // A duplicate name is EEXIST; deleting one end removes both.
    let err = host_nl.add_veth(&spec).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    host_nl.delete_link(host_end.index).unwrap();
    assert!(container_nl.link_by_name("eth0").unwrap().is_none());
    let err = host_nl.delete_link_by_name("cntv0").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
fn link_attributes_can_be_changed_and_read_back() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let veth = add_veth_pair(&mut nl);
    let index = veth.index;
    let mac: MacAddr = "02:aa:bb:cc:dd:ee".parse().unwrap();
    nl.set_link_mtu(index, 1280).unwrap();
    nl.set_link_mac(index, mac).unwrap();
    nl.set_link_alias(index, "original-name").unwrap();
    nl.set_link_txqlen(index, 123).unwrap();
    nl.set_link_promisc(index, true).unwrap();
    nl.set_link_allmulti(index, true).unwrap();
    nl.set_link_name(index, "cntrenamed").unwrap();
    nl.set_link_up(index).unwrap();

    let link = nl.link_by_index(index).unwrap().unwrap();
    assert_eq!(link.name, "cntrenamed");
    assert_eq!(link.mtu, 1280);
    assert_eq!(link.mac, Some(mac));
    assert_eq!(link.alias.as_deref(), Some("original-name"));
    assert_eq!(link.txqlen, Some(123));
    assert!(link.promisc && link.allmulti && link.up);

    let oracle = ip_link(&ns, "cntrenamed");
    assert_eq!(oracle["ifalias"], "original-name");
    assert_eq!(oracle["txqlen"], 123);
    assert_eq!(oracle["address"], mac.to_string());
    let flags: Vec<&str> =
        oracle["flags"].as_array().unwrap().iter().map(|flag| flag.as_str().unwrap()).collect();
    assert!(flags.contains(&"PROMISC") && flags.contains(&"ALLMULTI") && flags.contains(&"UP"));

    nl.set_link_promisc(index, false).unwrap();
    nl.set_link_down(index).unwrap();
    let link = nl.link_by_index(index).unwrap().unwrap();
    assert!(!link.promisc && !link.up);
    assert!(nl.links().unwrap().iter().any(|l| l.name == "cntrenamed"));
}

#[test]
fn bridge_with_ports_hairpin_and_isolation() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    // This machine's kernel is built without bridge VLAN filtering: then the request must
    // fail cleanly with EOPNOTSUPP and leave nothing behind; elsewhere it must take effect.
    let filtering = BridgeOptions { vlan_filtering: Some(true), vlan_default_pvid: None };
    match nl.add_bridge(&LinkSpec::new("cntbrvlan"), &filtering) {
        Ok(_) => {
            let oracle = ip_link(&ns, "cntbrvlan");
            assert_eq!(oracle["linkinfo"]["info_data"]["vlan_filtering"], 1);
        }
        Err(err) => {
            assert_eq!(err.errno(), Some(libc::EOPNOTSUPP), "{err}");
            assert!(nl.link_by_name("cntbrvlan").unwrap().is_none());
        }
    }

    let bridge =
        nl.add_bridge(&LinkSpec::new("cntbr0").mtu(1400), &BridgeOptions::default()).unwrap().unwrap();
    assert_eq!(bridge.kind, LinkKind::Bridge);
    assert_eq!(ip_link(&ns, "cntbr0")["linkinfo"]["info_kind"], "bridge");

    let port = add_veth_pair(&mut nl);
    nl.set_link_master(port.index, bridge.index).unwrap();
    nl.set_bridge_port_hairpin(port.index, true).unwrap();
    nl.set_bridge_port_isolated(port.index, true).unwrap();
    assert_eq!(nl.link_by_index(port.index).unwrap().unwrap().master, Some(bridge.index));
    let oracle = ip_link(&ns, "cntv0");
    assert_eq!(oracle["master"], "cntbr0");
    let slave = &oracle["linkinfo"]["info_slave_data"];
    assert_eq!(slave["hairpin"], true, "{oracle}");
    assert_eq!(slave["isolated"], true, "{oracle}");

    nl.set_bridge_port_hairpin(port.index, false).unwrap();
    assert_eq!(ip_link(&ns, "cntv0")["linkinfo"]["info_slave_data"]["hairpin"], false);

    nl.set_link_nomaster(port.index).unwrap();
    assert_eq!(nl.link_by_index(port.index).unwrap().unwrap().master, None);
}

#[test]
fn macvlan_and_vxlan() {
    let host = TestNetns::new().unwrap();
    let container = TestNetns::new().unwrap();
    let mut nl = host.netlink().unwrap();
    let parent = add_veth_pair(&mut nl);

    // A macvlan created straight into the container namespace.
    let created = nl
        .add_macvlan(&MacvlanSpec {
            link: LinkSpec::new("eth1").netns(container.netns()),
            parent_index: parent.index,
            mode: MacvlanMode::Bridge,
            bc_queue_len: None,
        })
        .unwrap();
    assert!(created.is_none(), "created elsewhere, not looked up here");
    let oracle = ip_link(&container, "eth1");
    assert_eq!(oracle["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(oracle["linkinfo"]["info_data"]["mode"], "bridge");
    let mut container_nl = container.netlink().unwrap();
    assert_eq!(container_nl.require_link("eth1").unwrap().kind, LinkKind::Macvlan);

    let vxlan = nl
        .add_vxlan(
            &LinkSpec::new("cntvx0"),
            &VxlanSpec {
                vni: 42,
                port: Some(4789),
                local: Some("10.99.0.1".parse().unwrap()),
                parent_index: Some(parent.index),
                learning: Some(false),
                ..VxlanSpec::default()
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(vxlan.kind, LinkKind::Vxlan);
    let oracle = ip_link(&host, "cntvx0");
    assert_eq!(oracle["linkinfo"]["info_data"]["id"], 42);
    assert_eq!(oracle["linkinfo"]["info_data"]["port"], 4789);
    assert_eq!(oracle["linkinfo"]["info_data"]["local"], "10.99.0.1");
}

#[test]
fn persistent_tap_and_tun_devices() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let mut tap = TunSpec::tap("cnttap0");
    tap.multi_queue = true;
    // Ids without a passwd/group entry, so `ip` prints them as numbers.
    tap.owner = Some(4242);
    tap.group = Some(4343);
    create_tun(&tap, Some(ns.netns())).unwrap();
    let mut tun = TunSpec::tap("cnttun0");
    tun.kind = TunType::Tun;
    create_tun(&tun, Some(ns.netns())).unwrap();

    let link = nl.require_link("cnttap0").unwrap();
    assert_eq!(link.kind, LinkKind::Tun);
    assert!(link.mac.is_some(), "a tap is an Ethernet device");
    let oracle = ip_link(&ns, "cnttap0");
    let info = &oracle["linkinfo"]["info_data"];
    assert_eq!(info["type"], "tap", "{oracle}");
    assert_eq!(info["pi"], false, "{oracle}");
    assert_eq!(info["multi_queue"], true, "{oracle}");
    assert_eq!(info["user"], 4242, "{oracle}");
    assert_eq!(info["group"], 4343, "{oracle}");
    assert_eq!(ip_link(&ns, "cnttun0")["linkinfo"]["info_data"]["type"], "tun");

    // Same name again: the kernel refuses (the device is persistent and owned).
    let mut other = TunSpec::tap("cnttun0");
    other.kind = TunType::Tap;
    assert!(create_tun(&other, Some(ns.netns())).is_err());

    nl.delete_link(link.index).unwrap();
    assert!(nl.link_by_name("cnttap0").unwrap().is_none());
}

#[test]
fn waiting_for_a_link_times_out_when_it_never_gets_carrier() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let veth = add_veth_pair(&mut nl);
    nl.set_link_up(veth.index).unwrap(); // peer stays down: no carrier
    let started = Instant::now();
    let err = nl.wait_for_link(veth.index, LinkCondition::Carrier, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, cni_net::Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let up = nl.wait_for_link(veth.index, LinkCondition::Up, Duration::from_millis(200)).unwrap();
    assert!(up.up && !up.carrier);

    // Bringing the peer up from another thread wakes the waiter through an event.
    let peer_index = nl.require_link("cntv0p").unwrap().index;
    let mut other = ns.netlink().unwrap();
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        other.set_link_up(peer_index).unwrap();
    });
    let ready = nl.wait_for_link(veth.index, LinkCondition::Carrier, Duration::from_secs(5)).unwrap();
    raiser.join().unwrap();
    assert!(ready.carrier);

    // Running comes after the kernel's link watcher has handled the carrier.
    let running = nl.wait_for_link(veth.index, LinkCondition::Running, Duration::from_secs(5)).unwrap();
    assert!(running.up && running.carrier && running.oper_up);
    let peer = nl.wait_for_link(peer_index, LinkCondition::Running, Duration::from_secs(5)).unwrap();
    assert!(peer.oper_up, "the peer is not operationally up: {peer:?}");
}
