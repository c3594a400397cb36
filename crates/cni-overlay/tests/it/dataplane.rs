//! The kernel side alone (no etcd): the device is created once and adopted after, and
//! `reconcile` converges on exactly one route, neighbour and FDB entry per peer, whatever
//! the kernel held before. Needs root.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use cni_net::netlink::{
    AddressFlags, FdbEntry, IpFamily, LinkSpec, NeighbourState, Route, RouteProtocol, VethSpec, MAIN_TABLE,
};
use cni_net::{MacAddr, Netlink};
use cni_overlay::config::Config;
use cni_overlay::dataplane::{self, Device};
use cni_overlay::peer::{Own, PeerPath, PeerRecord};
use cni_testkit::ns::TestNetns;
use ipnet::{IpNet, Ipv4Net};

fn config() -> Config {
    config_with(&[])
}

fn config_with(extra: &[&str]) -> Config {
    let args: Vec<String> =
        ["--etcd-endpoints", "http://127.0.0.1:1", "--iface", "ovu0", "--node", "n", "--device", "ovvx0"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
    Config::parse(&args).unwrap()
}

fn host() -> (TestNetns, Netlink) {
    let ns = TestNetns::with_prefix("ovdp").unwrap();
    let mut nl = ns.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new("ovu0"), peer: LinkSpec::new("ovu1") }).unwrap();
    let link = nl.require_link("ovu0").unwrap();
    nl.add_address(link.index, "192.168.92.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    nl.set_link_up(link.index).unwrap();
    (ns, nl)
}

const OWN_SUBNET: &str = "10.244.1.0/24";

/// A peer's record as the agent would accept it from etcd (its MAC derived from `underlay`).
fn peer(subnet: Ipv4Net, node: &str, underlay: [u8; 4]) -> PeerRecord {
    peer_as(&config(), subnet, node, underlay)
}

/// The same, as an agent with `config` (its backend decides the peer's path) sees it.
fn peer_as(config: &Config, subnet: Ipv4Net, node: &str, underlay: [u8; 4]) -> PeerRecord {
    let own = Own {
        subnet: OWN_SUBNET.parse().unwrap(),
        subnet6: None,
        underlay: Ipv4Addr::new(192, 168, 92, 1).into(),
        onlink: vec!["192.168.92.0/24".parse().unwrap()],
        wg_public_key: None,
    };
    let underlay = Ipv4Addr::from(underlay);
    let key = format!("/cni-rs/overlay/subnets/{}-{}", subnet.network(), subnet.prefix_len());
    let value = format!(
        r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{}"}}"#,
        dataplane::vtep_mac(underlay)
    );
    PeerRecord::parse(config, &own, key.as_bytes(), value.as_bytes(), 1).unwrap()
}

fn converge(nl: &mut Netlink, device: &Device, peers: &BTreeMap<Ipv4Net, PeerRecord>) {
    let underlay = dataplane::underlay(nl, "ovu0").unwrap();
    let failures = dataplane::reconcile(nl, &config(), &underlay, Some(device), peers).unwrap();
    assert!(failures.is_empty(), "{failures:?}");
}

/// The device's overlay entries: route destinations, permanent neighbours (address, MAC)
/// and FDB entries (MAC, remote).
type State = (Vec<IpNet>, Vec<(IpAddr, MacAddr)>, Vec<(MacAddr, IpAddr)>);

fn state(nl: &mut Netlink, device: &Device) -> State {
    let mut routes: Vec<IpNet> = nl
        .routes(IpFamily::V4, Some(MAIN_TABLE))
        .unwrap()
        .into_iter()
        .filter(|r| r.oif == Some(device.index) && r.gateway.is_some())
        .map(|r| r.destination)
        .collect();
    routes.sort();
    let mut neighbours: Vec<(IpAddr, MacAddr)> = nl
        .neighbours(IpFamily::V4, Some(device.index))
        .unwrap()
        .into_iter()
        .filter(|n| n.state == NeighbourState::Permanent)
        .map(|n| (n.address, n.mac.unwrap()))
        .collect();
    neighbours.sort_by_key(|(a, m)| (*a, m.octets()));
    let mut fdb: Vec<(MacAddr, IpAddr)> =
        nl.fdb_entries(device.index).unwrap().into_iter().filter_map(|f| Some((f.mac, f.dst?))).collect();
    fdb.sort_by_key(|(m, d)| (m.octets(), *d));
    (routes, neighbours, fdb)
}

#[test]
fn reconcile_converges_on_one_entry_set_per_peer() {
    let (_ns, mut nl) = host();
    let config = config();
    let underlay = dataplane::underlay(&mut nl, "ovu0").unwrap();
    let subnet: Ipv4Net = OWN_SUBNET.parse().unwrap();
    let device = dataplane::ensure_device(&mut nl, &config, &underlay, subnet, None).unwrap();
    assert_eq!(device.mtu, underlay.mtu - 50);
    // Adopted, not made again: same index; the VTEP address is the only one.
    let again = dataplane::ensure_device(&mut nl, &config, &underlay, subnet, None).unwrap();
    assert_eq!(again.index, device.index);
    let addresses = nl.addresses(Some(device.index), Some(IpFamily::V4)).unwrap();
    assert_eq!(addresses.iter().map(|a| a.address.to_string()).collect::<Vec<_>>(), ["10.244.1.0/32"]);

    let b: Ipv4Net = "10.244.2.0/24".parse().unwrap();
    let c: Ipv4Net = "10.244.3.0/24".parse().unwrap();
    let mut peers =
        BTreeMap::from([(b, peer(b, "b", [192, 168, 92, 2])), (c, peer(c, "c", [192, 168, 92, 3]))]);
    converge(&mut nl, &device, &peers);
    let first = state(&mut nl, &device);
    converge(&mut nl, &device, &peers);
    assert_eq!(state(&mut nl, &device), first, "a second reconcile changes nothing");
    assert_eq!(first.0, [IpNet::V4(b), IpNet::V4(c)]);
    assert_eq!(first.1.len(), 2);
    assert_eq!(first.2.len(), 2);

    // A stray FDB entry (a peer the agent no longer knows) and C moving to another
    // underlay address and MAC: only the current entries are left.
    let stray: MacAddr = "0a:58:c0:a8:5c:09".parse().unwrap();
    nl.replace_fdb(&FdbEntry { index: device.index, mac: stray, dst: Some("192.168.92.9".parse().unwrap()) })
        .unwrap();
    peers.insert(c, peer(c, "c", [192, 168, 92, 4]));
    converge(&mut nl, &device, &peers);
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert_eq!(routes, [IpNet::V4(b), IpNet::V4(c)]);
    let c_mac: MacAddr = "0a:58:c0:a8:5c:04".parse().unwrap();
    assert!(neighbours.contains(&(IpAddr::V4(c.network()), c_mac)), "{neighbours:?}");
    assert_eq!(neighbours.len(), 2, "{neighbours:?}");
    assert_eq!(fdb.len(), 2, "{fdb:?}");
    assert!(fdb.contains(&(c_mac, "192.168.92.4".parse().unwrap())), "{fdb:?}");

    // Every peer gone: nothing of the overlay is left on the device.
    converge(&mut nl, &device, &BTreeMap::new());
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert!(
        routes.is_empty() && neighbours.is_empty() && fdb.is_empty(),
        "{routes:?} {neighbours:?} {fdb:?}"
    );
}

/// A reconcile writes only the peers whose entries are not all there: a peer's route
/// marked by hand (another protocol, so a rewrite would show) stays untouched, while a
/// peer that lost its FDB entry gets it back. (At 100 nodes rewriting every peer's
/// entries on every change was more than half of a join's CPU: docs/multi-host.md.)
#[test]
fn reconcile_rewrites_only_the_peers_missing_an_entry() {
    let (_ns, mut nl) = host();
    let config = config();
    let underlay = dataplane::underlay(&mut nl, "ovu0").unwrap();
    let device =
        dataplane::ensure_device(&mut nl, &config, &underlay, OWN_SUBNET.parse().unwrap(), None).unwrap();
    let [b, c]: [Ipv4Net; 2] = ["10.244.2.0/24", "10.244.3.0/24"].map(|s| s.parse().unwrap());
    let peers = BTreeMap::from([(b, peer(b, "b", [192, 168, 92, 2])), (c, peer(c, "c", [192, 168, 92, 3]))]);
    converge(&mut nl, &device, &peers);
    let marked = Route::new(IpNet::V4(b))
        .gateway(IpAddr::V4(b.network()))
        .oif(device.index)
        .onlink()
        .protocol(RouteProtocol::Static);
    nl.replace_route(&marked).unwrap();
    let c_fdb = FdbEntry {
        index: device.index,
        mac: dataplane::vtep_mac(Ipv4Addr::new(192, 168, 92, 3)),
        dst: Some("192.168.92.3".parse().unwrap()),
    };
    nl.delete_fdb(&c_fdb).unwrap();
    let before = state(&mut nl, &device);
    assert_eq!(before.2.len(), 1, "C's FDB entry is gone: {before:?}");

    converge(&mut nl, &device, &peers);
    let protocol_of = |nl: &mut Netlink, subnet: Ipv4Net| {
        let routes = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).unwrap();
        routes.into_iter().find(|r| r.destination == IpNet::V4(subnet)).map(|r| r.protocol)
    };
    assert_eq!(protocol_of(&mut nl, b), Some(RouteProtocol::Static), "B's entries were written again");
    assert_eq!(protocol_of(&mut nl, c), Some(RouteProtocol::Boot));
    let (_, _, fdb) = state(&mut nl, &device);
    assert!(fdb.contains(&(c_fdb.mac, c_fdb.dst.unwrap())), "C's FDB entry is not back: {fdb:?}");
}

/// A peer the kernel refuses (here: its VTEP address is also a local address, so the
/// route's gateway is invalid, EINVAL) does not keep the others from converging, and it
/// converges once the obstacle is gone.
#[test]
fn one_refused_peer_does_not_stop_the_others() {
    let (_ns, mut nl) = host();
    let config = config();
    let underlay = dataplane::underlay(&mut nl, "ovu0").unwrap();
    let device =
        dataplane::ensure_device(&mut nl, &config, &underlay, OWN_SUBNET.parse().unwrap(), None).unwrap();
    let [a, b, c]: [Ipv4Net; 3] =
        ["10.244.2.0/24", "10.244.3.0/24", "10.244.4.0/24"].map(|s| s.parse().unwrap());
    let peers = BTreeMap::from([
        (a, peer(a, "a", [192, 168, 92, 2])),
        (b, peer(b, "b", [192, 168, 92, 3])),
        (c, peer(c, "c", [192, 168, 92, 4])),
    ]);
    let lo = nl.require_link("lo").unwrap().index;
    nl.set_link_up(lo).unwrap();
    let obstacle = IpNet::V4(Ipv4Net::new(b.network(), 32).unwrap());
    nl.add_address(lo, obstacle, AddressFlags::empty()).unwrap();

    let failures = dataplane::reconcile(&mut nl, &config, &underlay, Some(&device), &peers).unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].subject.contains("10.244.3.0/24"), "{}", failures[0]);
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert_eq!(routes, [IpNet::V4(a), IpNet::V4(c)], "the peers around the refused one converged");
    assert_eq!((neighbours.len(), fdb.len()), (3, 3), "{neighbours:?} {fdb:?}");

    // Retried once the kernel would accept it: all three converge.
    nl.delete_address(lo, obstacle).unwrap();
    converge(&mut nl, &device, &peers);
    let (routes, _, _) = state(&mut nl, &device);
    assert_eq!(routes, [IpNet::V4(a), IpNet::V4(b), IpNet::V4(c)]);
}

/// `--backend auto`: a peer on the underlay's prefix gets one plain route via its underlay
/// address (no neighbour, no FDB entry); when it moves off the L2 it is reprogrammed over
/// VXLAN, and back; the direct route of a peer that is gone is removed. The kernel's own
/// dumps are the judge.
#[test]
fn a_peer_changing_path_is_reprogrammed() {
    let (_ns, mut nl) = host();
    let config = config_with(&["--backend", "auto"]);
    let underlay = dataplane::underlay(&mut nl, "ovu0").unwrap();
    assert_eq!(underlay.onlink, ["192.168.92.0/24".parse::<IpNet>().unwrap()]);
    let device =
        dataplane::ensure_device(&mut nl, &config, &underlay, OWN_SUBNET.parse().unwrap(), None).unwrap();
    // A route to the other segment, so the off-link peer's underlay is reachable.
    nl.replace_route(
        &Route::new("198.51.100.0/24".parse().unwrap()).gateway("192.168.92.254".parse().unwrap()),
    )
    .unwrap();
    let b: Ipv4Net = "10.244.2.0/24".parse().unwrap();
    let direct_routes = |nl: &mut Netlink| -> Vec<(IpNet, Option<IpAddr>)> {
        nl.routes(IpFamily::V4, Some(MAIN_TABLE))
            .unwrap()
            .into_iter()
            .filter(|r| r.oif == Some(underlay.index) && IpNet::V4(config.network).contains(&r.destination))
            .map(|r| (r.destination, r.gateway))
            .collect()
    };
    let reconcile = |nl: &mut Netlink, peers: &BTreeMap<Ipv4Net, PeerRecord>| {
        let failures = dataplane::reconcile(nl, &config, &underlay, Some(&device), peers).unwrap();
        assert!(failures.is_empty(), "{failures:?}");
    };

    let on_link = BTreeMap::from([(b, peer_as(&config, b, "b", [192, 168, 92, 2]))]);
    assert_eq!(on_link[&b].path(), PeerPath::Direct);
    reconcile(&mut nl, &on_link);
    assert_eq!(direct_routes(&mut nl), [(IpNet::V4(b), Some("192.168.92.2".parse().unwrap()))]);
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert!(
        routes.is_empty() && neighbours.is_empty() && fdb.is_empty(),
        "{routes:?} {neighbours:?} {fdb:?}"
    );

    let moved = BTreeMap::from([(b, peer_as(&config, b, "b", [198, 51, 100, 2]))]);
    assert_eq!(moved[&b].path(), PeerPath::Vxlan);
    reconcile(&mut nl, &moved);
    assert!(direct_routes(&mut nl).is_empty(), "the direct route outlived the move");
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert_eq!((routes, neighbours.len()), (vec![IpNet::V4(b)], 1));
    assert_eq!(fdb, [(dataplane::vtep_mac(Ipv4Addr::new(198, 51, 100, 2)), "198.51.100.2".parse().unwrap())]);

    reconcile(&mut nl, &on_link);
    assert_eq!(direct_routes(&mut nl).len(), 1);
    let (routes, neighbours, fdb) = state(&mut nl, &device);
    assert!(
        routes.is_empty() && neighbours.is_empty() && fdb.is_empty(),
        "{routes:?} {neighbours:?} {fdb:?}"
    );

    reconcile(&mut nl, &BTreeMap::new());
    assert!(direct_routes(&mut nl).is_empty(), "the gone peer's direct route stayed");
    // A route of the operator's own outside the pod network is not the overlay's.
    assert!(nl
        .routes(IpFamily::V4, Some(MAIN_TABLE))
        .unwrap()
        .iter()
        .any(|r| r.destination.to_string() == "198.51.100.0/24"));
}
