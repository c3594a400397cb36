//! Direct routing (flannel's host-gw) on the real kernel with a real etcd: `--backend
//! direct` on three hosts of one L2 segment, and `--backend auto` with one host behind a
//! router (VXLAN to it, direct between the others) that then moves onto the segment. The
//! kernel's own dumps show which path each peer got; TCP between the pods of every pair
//! shows it carries traffic. Needs root and Debian's etcd-server. Names carry `or`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::harness::{pods_talk, Cluster, Layout, DEVICE, PREFIX};
use cni_net::netlink::{AddressFlags, IpFamily, LinkSpec, NeighbourState, Route, VethSpec};
use cni_overlay::dataplane::vtep_mac;
use cni_testkit::etcd::EtcdCluster;
use ipnet::IpNet;

/// How long the entries may take to converge: generous, as the machine may be busy (only a
/// failing run waits this long).
const WAIT: Duration = Duration::from_secs(30);

fn subnet(cluster: &Cluster, i: usize) -> IpNet {
    IpNet::V4(cluster.hosts[i].subnet().expect("the host's subnet"))
}

/// Host `i`'s direct routes should be exactly `peers`' subnets via their underlay addresses.
fn want_direct(cluster: &Cluster, peers: &[usize]) -> Vec<(IpNet, IpAddr)> {
    let mut want: Vec<(IpNet, IpAddr)> =
        peers.iter().map(|&p| (subnet(cluster, p), cluster.hosts[p].underlay)).collect();
    want.sort();
    want
}

#[test]
fn direct_routing_across_three_hosts() {
    let mut cluster = Cluster::start("ord", EtcdCluster::start("ord", 1), 3);
    let endpoints = cluster.etcd.endpoints();
    // First over VXLAN, then every agent restarted with --backend direct: the device and
    // its entries go, the routes turn direct.
    for host in &mut cluster.hosts {
        host.start_agent(&endpoints, &[]);
    }
    for i in 0..3 {
        assert!(cluster.wait_peers(i, &cluster.others(i), WAIT), "host {i} over VXLAN\n{}", cluster.logs());
    }
    // A record claiming an underlay address off the hosts' segment (fine over VXLAN): with
    // --backend direct a route via it would hand the pods' packets to whatever the default
    // route reaches.
    let lease = cluster.etcd.client().lease_grant(600).unwrap();
    let off_link = Ipv4Addr::new(198, 51, 100, 7);
    let value = format!(r#"{{"node":"or-evil","underlay":"{off_link}","vtepMac":"{}"}}"#, vtep_mac(off_link));
    let hostile_key = format!("{PREFIX}/subnets/10.244.250.0-24");
    cluster.etcd.client().put(hostile_key.as_bytes(), value.as_bytes(), lease).unwrap();

    for host in &mut cluster.hosts {
        host.kill_agent();
        host.start_agent(&endpoints, &["--backend", "direct"]);
    }
    for i in 0..3 {
        let want = want_direct(&cluster, &cluster.others(i));
        cluster.wait_entries(i, WAIT, "direct routes to both peers", |e| e.direct_routes() == want);
        let host = &cluster.hosts[i];
        let mut nl = host.netlink();
        assert!(nl.link_by_name(DEVICE).unwrap().is_none(), "host {i} kept its VXLAN device");
        // No encapsulation state anywhere: no VXLAN link at all, no permanent neighbour.
        let links = nl.links().unwrap();
        assert!(links.iter().all(|l| l.kind != cni_net::netlink::LinkKind::Vxlan), "{links:?}");
        let permanent = nl
            .neighbours(IpFamily::V4, None)
            .unwrap()
            .into_iter()
            .filter(|n| n.state == NeighbourState::Permanent)
            .count();
        assert_eq!(permanent, 0, "host {i} has permanent neighbours");
        let entries = host.entries();
        assert!(!entries.routes_to("10.244.250.0/24".parse::<IpNet>().unwrap()), "{entries:?}");
        assert!(host.agent_log().contains("not on-link on --iface ovu0"), "{}", host.agent_log());
    }

    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts {
        host.add_pod(&plugins);
    }
    // Without encapsulation the pods get the underlay's whole MTU.
    let underlay_mtu = cluster.hosts[0].netlink().require_link("ovu0").unwrap().mtu;
    let pod_mtu = cluster.hosts[0].pod.as_ref().unwrap().netlink().unwrap().require_link("eth0").unwrap().mtu;
    assert_eq!(pod_mtu, underlay_mtu);
    cluster.all_pods_talk(false);

    // A peer leaving (its record deleted) takes its route with it.
    let gone = subnet(&cluster, 2);
    cluster.hosts[2].kill_agent();
    cluster.etcd.client().delete(format!("{PREFIX}/subnets/{}-24", gone.network()).as_bytes()).unwrap();
    for i in [0, 1] {
        let want = want_direct(&cluster, &[1 - i]);
        cluster.wait_entries(i, WAIT, "only the remaining peer's route", |e| e.direct_routes() == want);
    }
}

/// Moves host `i` (on segment 2) onto segment 1: its underlay port to the first bridge,
/// its address to the first segment's.
fn move_to_first_segment(cluster: &mut Cluster, layout: &Layout, i: usize) {
    let mut unl = cluster.underlay_ns.netlink().unwrap();
    let port = unl.require_link(&format!("ovp{i}")).unwrap().index;
    let bridge = unl.require_link("ovbr").unwrap().index;
    unl.set_link_master(port, bridge).unwrap();
    let host = &mut cluster.hosts[i];
    let mut nl = host.netlink();
    let link = nl.require_link("ovu0").unwrap().index;
    nl.delete_address(link, layout.address(2, i)).unwrap();
    let address = layout.address(1, i);
    nl.add_address(link, address, AddressFlags::Nodad).unwrap();
    nl.replace_route(&Route::new(layout.router(2).trunc()).gateway(layout.router(1).addr()).oif(link))
        .unwrap();
    host.underlay = address.addr();
}

#[test]
fn auto_is_direct_on_link_and_vxlan_across_a_router() {
    let layout = Layout { ipv6: false, routed: vec![2] };
    let mut cluster = Cluster::start_with("ora", EtcdCluster::start("ora", 1), 3, &layout);
    let endpoints = cluster.etcd.endpoints();
    for host in &mut cluster.hosts {
        host.start_agent(&endpoints, &["--backend", "auto"]);
    }
    let c_subnet = subnet(&cluster, 2);
    on_link_peers_direct_the_routed_one_over_vxlan(&cluster);
    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts {
        host.add_pod(&plugins);
    }
    cluster.all_pods_talk(false);
    a_routes_c_directly_while_c_is_on_link(&cluster, &layout);
    cluster.all_pods_talk(false);
    c_moved_onto_the_segment_is_direct_for_every_peer(&mut cluster, &layout, &endpoints, c_subnet);
    cluster.all_pods_talk(false);
}

/// A and B: each other direct, C over VXLAN (one route, neighbour, FDB entry) — C on the
/// far side of the router. C: both over VXLAN, nothing direct.
fn on_link_peers_direct_the_routed_one_over_vxlan(cluster: &Cluster) {
    let (c_subnet, c_underlay) = (subnet(cluster, 2), cluster.hosts[2].underlay);
    for i in [0, 1] {
        let want = want_direct(cluster, &[1 - i]);
        cluster.wait_entries(i, WAIT, "B/A direct, C over VXLAN", |e| {
            e.direct_routes() == want
                && e.vxlan_routes() == [c_subnet]
                && e.neighbours.len() == 1
                && e.fdb.len() == 1
                && e.has_underlay(c_underlay)
        });
    }
    let mut ab = vec![subnet(cluster, 0), subnet(cluster, 1)];
    ab.sort();
    cluster.wait_entries(2, WAIT, "A and B over VXLAN", |e| {
        e.direct.is_empty() && e.vxlan_routes() == ab && e.neighbours.len() == 2 && e.fdb.len() == 2
    });
}

/// The two segments joined at L2 and A given an address in C's prefix: C is on-link for A
/// now, and A's agent (which rereads its prefixes every keep-alive) routes C directly
/// while C still reaches A over VXLAN through the router; the address removed, A goes back
/// to VXLAN for C. The segments are parted again at the end.
fn a_routes_c_directly_while_c_is_on_link(cluster: &Cluster, layout: &Layout) {
    let (c_subnet, c_underlay) = (subnet(cluster, 2), cluster.hosts[2].underlay);
    let mut unl = cluster.underlay_ns.netlink().unwrap();
    unl.add_veth(&VethSpec { link: LinkSpec::new("orj1"), peer: LinkSpec::new("orj2") }).unwrap();
    for (end, bridge) in [("orj1", "ovbr"), ("orj2", "ovbr2")] {
        let end = unl.require_link(end).unwrap().index;
        let bridge = unl.require_link(bridge).unwrap().index;
        unl.set_link_master(end, bridge).unwrap();
        unl.set_link_up(end).unwrap();
    }
    let mut a_nl = cluster.hosts[0].netlink();
    let a_ovu0 = a_nl.require_link("ovu0").unwrap().index;
    let via_router = Route::new(layout.router(2).trunc()).gateway(layout.router(1).addr()).oif(a_ovu0);
    a_nl.delete_route(&via_router).unwrap();
    let second: IpNet = "192.168.92.101/24".parse().unwrap();
    a_nl.add_address(a_ovu0, second, AddressFlags::Nodad).unwrap();
    let b_direct = (subnet(cluster, 1), cluster.hosts[1].underlay);
    let mut both = vec![b_direct, (c_subnet, c_underlay)];
    both.sort();
    cluster.wait_entries(0, WAIT, "C direct once on-link", |e| e.direct_routes() == both && e.fdb.is_empty());
    for (from, to) in [(0, 2), (2, 0)] {
        pods_talk(&cluster.hosts[from], &cluster.hosts[to])
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    }
    a_nl.delete_address(a_ovu0, second).unwrap();
    a_nl.replace_route(&via_router).unwrap();
    cluster.wait_entries(0, WAIT, "C over VXLAN again", |e| {
        e.direct_routes() == [b_direct]
            && e.vxlan_routes() == [c_subnet]
            && e.neighbours.len() == 1
            && e.fdb.len() == 1
            && e.has_underlay(c_underlay)
    });
    let junction = unl.require_link("orj1").unwrap().index;
    unl.delete_link(junction).unwrap();
}

/// C moves onto A's and B's segment: its restarted agent publishes the new underlay
/// address (same subnet, same lease), and every peer's path to it turns direct; the VXLAN
/// entries for it go, and C's device is made again for its new underlay address (its MAC
/// is derived from it).
fn c_moved_onto_the_segment_is_direct_for_every_peer(
    cluster: &mut Cluster,
    layout: &Layout,
    endpoints: &[String],
    c_subnet: IpNet,
) {
    cluster.hosts[2].kill_agent();
    move_to_first_segment(cluster, layout, 2);
    cluster.hosts[2].start_agent(endpoints, &["--backend", "auto"]);
    assert_eq!(subnet(cluster, 2), c_subnet, "C kept its subnet");
    for i in 0..3 {
        let want = want_direct(cluster, &cluster.others(i));
        cluster.wait_entries(i, WAIT, "every peer direct after the move", |e| {
            e.direct_routes() == want && e.routes.is_empty() && e.neighbours.is_empty() && e.fdb.is_empty()
        });
    }
    let c_device = cluster.hosts[2].netlink().require_link(DEVICE).unwrap();
    assert_eq!(c_device.mac, Some(vtep_mac(cluster.hosts[2].underlay)));
}
