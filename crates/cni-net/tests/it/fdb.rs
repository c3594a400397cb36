//! VXLAN FDB entries on the real kernel: two "hosts" (namespaces joined by a veth
//! underlay), a VXLAN device on each with learning off, and per peer one FDB entry and one
//! permanent neighbour — exactly what an overlay agent programs. TCP must cross the
//! overlay; the kernel's own view (`bridge -j fdb`) must show the entries. Needs root.

use std::net::SocketAddr;
use std::time::Duration;

use cni_net::netlink::{AddressFlags, FdbEntry, LinkSpec, Neighbour, VethSpec, VxlanSpec};
use cni_net::MacAddr;
use cni_testkit::ns::{require_root, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};

struct Host {
    ns: TestNetns,
    vxlan_index: u32,
    vtep_mac: MacAddr,
}

fn host(ns: TestNetns, underlay: &str, overlay: &str, mac: &str) -> Host {
    let mut nl = ns.netlink().unwrap();
    let lo = nl.require_link("lo").unwrap();
    nl.set_link_up(lo.index).unwrap();
    let under = nl.require_link("edu0").unwrap();
    nl.add_address(under.index, underlay.parse().unwrap(), AddressFlags::empty()).unwrap();
    nl.set_link_up(under.index).unwrap();
    let vtep_mac: MacAddr = mac.parse().unwrap();
    let local = underlay.split('/').next().unwrap().parse().unwrap();
    let vxlan = nl
        .add_vxlan(
            &LinkSpec::new("edvx0").mac(vtep_mac).mtu(1450),
            &VxlanSpec {
                vni: 77,
                port: Some(4789),
                local: Some(local),
                parent_index: Some(under.index),
                learning: Some(false),
                ..VxlanSpec::default()
            },
        )
        .unwrap()
        .unwrap();
    nl.add_address(vxlan.index, overlay.parse().unwrap(), AddressFlags::empty()).unwrap();
    nl.set_link_up(vxlan.index).unwrap();
    Host { ns, vxlan_index: vxlan.index, vtep_mac }
}

/// On `from`, the route to `to`'s overlay address: its VTEP MAC via `to`'s underlay address.
fn program_peer(from: &Host, to: &Host, to_underlay: &str, to_overlay: &str) {
    let mut nl = from.ns.netlink().unwrap();
    let entry =
        FdbEntry { index: from.vxlan_index, mac: to.vtep_mac, dst: Some(to_underlay.parse().unwrap()) };
    nl.replace_fdb(&entry).unwrap();
    nl.replace_fdb(&entry).unwrap(); // replace: idempotent
    nl.replace_neighbour(&Neighbour::permanent(from.vxlan_index, to_overlay.parse().unwrap(), to.vtep_mac))
        .unwrap();
}

#[test]
fn fdb_and_neighbour_per_peer_carry_tcp_over_vxlan() {
    require_root();
    let a = TestNetns::with_prefix("ed").unwrap();
    let b = TestNetns::with_prefix("ed").unwrap();
    a.netlink()
        .unwrap()
        .add_veth(&VethSpec { link: LinkSpec::new("edu0"), peer: LinkSpec::new("edu0").netns(b.netns()) })
        .unwrap();
    let a = host(a, "192.168.77.1/24", "10.77.0.1/24", "02:ed:00:00:00:01");
    let b = host(b, "192.168.77.2/24", "10.77.0.2/24", "02:ed:00:00:00:02");
    program_peer(&a, &b, "192.168.77.2", "10.77.0.2");
    program_peer(&b, &a, "192.168.77.1", "10.77.0.1");

    // Our dump and the kernel's own tool agree on the entry.
    let entries = a.ns.netlink().unwrap().fdb_entries(a.vxlan_index).unwrap();
    let to_b = FdbEntry { index: a.vxlan_index, mac: b.vtep_mac, dst: Some("192.168.77.2".parse().unwrap()) };
    assert!(entries.contains(&to_b), "{entries:?}");
    let oracle = a.ns.command("bridge").args(["-j", "fdb", "show", "dev", "edvx0"]).output().unwrap();
    let oracle: serde_json::Value = serde_json::from_slice(&oracle.stdout).unwrap();
    let listed = oracle.as_array().unwrap();
    assert!(listed.iter().any(|e| e["mac"] == "02:ed:00:00:00:02" && e["dst"] == "192.168.77.2"), "{oracle}");

    // TCP across the overlay, with a payload larger than one segment.
    let server = tcp_echo_server(b.ns.netns(), "10.77.0.2:0".parse().unwrap()).unwrap();
    let addr: SocketAddr = server.local_addr();
    tcp_echo(a.ns.netns(), addr, &vec![0x5a; 64 * 1024], Duration::from_secs(5)).unwrap();

    // Removing the peer's entry: it is gone from the table.
    let mut nl = a.ns.netlink().unwrap();
    nl.delete_fdb(&to_b).unwrap();
    assert!(!nl.fdb_entries(a.vxlan_index).unwrap().contains(&to_b));
    assert!(nl.delete_fdb(&to_b).is_err(), "deleting an absent entry reports it");
}
