//! The kernel side. Per peer reached over VXLAN: on the VXLAN device a route to each of its
//! pod subnets via its VTEP address (onlink), a permanent neighbour (VTEP address → VTEP
//! MAC) per family, and an FDB entry (VTEP MAC → underlay address). Per peer routed
//! directly (`--backend direct|auto`): a plain route to its pod subnet via its underlay
//! address on the underlay interface, nothing else. Everything is written with replace
//! semantics and reconciled against the kernel's own dumps, so running it twice, or after
//! a restart, or after a peer changed its path, converges on the same state.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_net::netlink::{
    AddressFlags, FdbEntry, IpFamily, LinkKind, LinkSpec, Neighbour, NeighbourState, Route, VxlanSpec,
    MAIN_TABLE,
};
use cni_net::{MacAddr, Netlink};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::config::Config;
use crate::lease::fnv1a64;
use crate::peer::{PeerPath, PeerRecord};
use crate::{Error, Result};

/// VXLAN's own headers over IPv4: outer IP (20) + UDP (8) + VXLAN (8) + inner Ethernet (14).
pub const VXLAN_OVERHEAD: u32 = 50;

/// The same over IPv6 (a 40-byte outer header).
pub const VXLAN6_OVERHEAD: u32 = 70;

/// WireGuard's over IPv4: outer IP (20) + UDP (8) + its data header (16) + the
/// authentication tag (16). The inner packet is IP, no Ethernet header.
pub const WIREGUARD_OVERHEAD: u32 = 60;

/// The same over IPv6.
pub const WIREGUARD6_OVERHEAD: u32 = 80;

/// The scope of a link-local address (`RT_SCOPE_LINK`).
const SCOPE_LINK: u8 = 253;

/// The underlay interface the VXLAN packets (and directly routed pod packets) leave by.
#[derive(Debug, Clone)]
pub struct Underlay {
    pub index: u32,
    /// The node's underlay address: the interface's first IPv4 address, or its first
    /// global IPv6 address when it has no IPv4 one.
    pub address: IpAddr,
    pub mtu: u32,
    /// The interface's prefixes of that family: peers in one are on-link.
    pub onlink: Vec<IpNet>,
}

impl Underlay {
    /// The VXLAN device's MTU over this underlay.
    pub fn vxlan_mtu(&self) -> u32 {
        self.mtu
            - match self.address {
                IpAddr::V4(_) => VXLAN_OVERHEAD,
                IpAddr::V6(_) => VXLAN6_OVERHEAD,
            }
    }

    /// The WireGuard device's MTU over this underlay.
    pub fn wireguard_mtu(&self) -> u32 {
        self.mtu
            - match self.address {
                IpAddr::V4(_) => WIREGUARD_OVERHEAD,
                IpAddr::V6(_) => WIREGUARD6_OVERHEAD,
            }
    }
}

/// What the overlay's device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Vxlan,
    /// An L3 device: no neighbours or FDB entries, its peers are set over generic netlink.
    Wireguard,
}

/// The node's overlay device.
#[derive(Debug, Clone)]
pub struct Device {
    pub index: u32,
    /// The VTEP MAC (VXLAN; zero for WireGuard, which has none).
    pub mac: MacAddr,
    pub mtu: u32,
    pub kind: DeviceKind,
}

/// The underlay interface's index, address (IPv4 preferred), connected prefixes and MTU.
pub fn underlay(nl: &mut Netlink, name: &str) -> Result<Underlay> {
    let link = nl.require_link(name)?;
    // A link-scope (link-local IPv6) address is not one peers could be told.
    let global: Vec<IpNet> = nl
        .addresses(Some(link.index), None)?
        .into_iter()
        .filter(|a| a.scope != SCOPE_LINK)
        .map(|a| a.address)
        .collect();
    let address = global
        .iter()
        .find(|a| a.addr().is_ipv4())
        .or_else(|| global.first())
        .map(IpNet::addr)
        .ok_or_else(|| Error::Config(format!("--iface {name} has no IPv4 or global IPv6 address")))?;
    let onlink =
        global.iter().filter(|a| a.addr().is_ipv4() == address.is_ipv4()).map(IpNet::trunc).collect();
    Ok(Underlay { index: link.index, address, mtu: link.mtu, onlink })
}

/// A stable, locally administered unicast MAC for a node's VTEP, derived from its underlay
/// address, so the device keeps it when it is recreated and peers' entries stay right, and
/// every peer can check a record's MAC. IPv4: `0a:58:` + the four octets (one MAC per
/// address). IPv6: `0e:` + the top five bytes of the address's FNV-1a hash: the last bytes
/// alone would collide for `2001:db8:1::5` and `2001:db8:2::5`, and `0e` keeps the two
/// families' MACs apart.
pub fn vtep_mac(underlay: impl Into<IpAddr>) -> MacAddr {
    match underlay.into() {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            MacAddr([0x0a, 0x58, a, b, c, d])
        }
        IpAddr::V6(v6) => {
            let [h0, h1, h2, h3, h4, ..] = fnv1a64(&v6.octets()).to_be_bytes();
            MacAddr([0x0e, h0, h1, h2, h3, h4])
        }
    }
}

/// The node's VTEP address: the subnet's network address, as a /32 on the VXLAN device.
pub fn vtep_address(subnet: Ipv4Net) -> Ipv4Addr {
    subnet.network()
}

/// The node's IPv6 VTEP address: the IPv6 subnet's first address, a /128 on the device.
pub fn vtep_address6(subnet: Ipv6Net) -> Ipv6Addr {
    subnet.network()
}

/// A node's pod subnets with the VTEP address of each, IPv4 first.
fn with_vteps(subnet: Ipv4Net, subnet6: Option<Ipv6Net>) -> Vec<(IpNet, IpAddr)> {
    let v4 = (IpNet::V4(subnet), IpAddr::V4(vtep_address(subnet)));
    let v6 = subnet6.map(|s| (IpNet::V6(s), IpAddr::V6(vtep_address6(s))));
    std::iter::once(v4).chain(v6).collect()
}

/// Creates the VXLAN device, or adopts the one a previous run left (its MAC is derived
/// from the underlay address, so the peers' FDB and neighbour entries stay valid), and
/// gives it the VTEP address of each of the node's subnets.
pub fn ensure_device(
    nl: &mut Netlink,
    config: &Config,
    underlay: &Underlay,
    subnet: Ipv4Net,
    subnet6: Option<Ipv6Net>,
) -> Result<Device> {
    let mtu = underlay.vxlan_mtu();
    let existing = match nl.link_by_name(&config.device)? {
        Some(link) if link.kind != LinkKind::Vxlan => {
            return Err(Error::Config(format!("{} exists and is not a VXLAN device", config.device)))
        }
        other => other,
    };
    let mac = vtep_mac(underlay.address);
    let existing = match existing {
        // The MAC is derived from the underlay address: another MAC means the device was
        // made for another address (the node moved, or it was made by hand) and its VXLAN
        // source address is wrong too, which only a new device can change.
        Some(link) if link.mac != Some(mac) => {
            nl.delete_link(link.index)?;
            None
        }
        other => other,
    };
    let link = match existing {
        Some(link) => link,
        None => {
            let spec = VxlanSpec {
                vni: config.vni,
                port: Some(config.port),
                local: Some(underlay.address),
                parent_index: Some(underlay.index),
                learning: Some(false),
                ..VxlanSpec::default()
            };
            nl.add_vxlan(&LinkSpec::new(&config.device).mac(mac).mtu(mtu), &spec)?;
            nl.require_link(&config.device)?
        }
    };
    if link.mtu != mtu {
        nl.set_link_mtu(link.index, mtu)?;
    }
    assign_vteps(nl, link.index, subnet, subnet6)?;
    Ok(Device { index: link.index, mac, mtu, kind: DeviceKind::Vxlan })
}

/// Gives the device `index` the VTEP address of each of the node's subnets (and only
/// those), and sets it up.
pub fn assign_vteps(nl: &mut Netlink, index: u32, subnet: Ipv4Net, subnet6: Option<Ipv6Net>) -> Result<()> {
    let vteps: Vec<IpNet> = with_vteps(subnet, subnet6)
        .into_iter()
        .map(|(_, vtep)| IpNet::new(vtep, if vtep.is_ipv4() { 32 } else { 128 }).expect("host prefix"))
        .collect();
    for stale in nl.addresses(Some(index), None)? {
        // The kernel's own link-local IPv6 address stays.
        if stale.scope != SCOPE_LINK && !vteps.contains(&stale.address) {
            nl.delete_address(index, stale.address)?;
        }
    }
    for vtep in vteps {
        // No duplicate address detection: the address is the node's by its lease, and a
        // tentative address could not be a route's source meanwhile.
        nl.replace_address(index, vtep, AddressFlags::Nodad)?;
    }
    nl.set_link_up(index)?;
    Ok(())
}

/// Removes the VXLAN device a previous run with another backend left (with its routes,
/// neighbours and FDB entries), when `--backend direct` needs none; a link of that name
/// that is not VXLAN is not the agent's and is refused as in [`ensure_device`].
pub fn remove_device(nl: &mut Netlink, config: &Config) -> Result<()> {
    match nl.link_by_name(&config.device)? {
        Some(link) if link.kind != LinkKind::Vxlan => {
            Err(Error::Config(format!("{} exists and is not a VXLAN device", config.device)))
        }
        Some(link) => Ok(nl.delete_link(link.index)?),
        None => Ok(()),
    }
}

/// One kernel request of [`reconcile`] that failed: what it was for, and the error.
#[derive(Debug)]
pub struct Failure {
    /// The peer's subnet (or the stale entry) the request was about.
    pub subject: String,
    pub error: cni_net::Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.error)
    }
}

/// What the kernel should hold for the peers: routes (on the device or the underlay
/// interface), the device's permanent neighbours and its FDB entries.
#[derive(Debug, Default)]
struct Wanted {
    routes: HashSet<(IpNet, IpAddr, u32)>,
    neighbours: HashSet<(IpAddr, MacAddr)>,
    remotes: HashSet<(MacAddr, IpAddr)>,
}

impl Wanted {
    /// Everything the peers' entries name.
    fn of<'a>(peers: impl Iterator<Item = &'a PeerEntries>) -> Wanted {
        let mut wanted = Wanted::default();
        for entries in peers {
            for route in &entries.routes {
                wanted.routes.insert((
                    route.destination,
                    route.gateway.expect("gateway"),
                    route.oif.expect("oif"),
                ));
            }
            wanted.neighbours.extend(entries.neighbours.iter().filter_map(|n| Some((n.address, n.mac?))));
            wanted.remotes.extend(entries.fdb.iter().filter_map(|f| Some((f.mac, f.dst?))));
        }
        wanted
    }

    /// Whether every one of a peer's entries is among these.
    fn has_all(&self, entries: &PeerEntries) -> bool {
        entries.routes.iter().all(|r| self.has_route(r))
            && entries.neighbours.iter().all(|n| self.has_neighbour(n))
            && entries.fdb.as_ref().is_none_or(|f| self.has_remote(f))
    }

    fn has_route(&self, route: &Route) -> bool {
        match (route.gateway, route.oif) {
            (Some(gateway), Some(oif)) => self.routes.contains(&(route.destination, gateway, oif)),
            _ => false,
        }
    }

    fn has_neighbour(&self, neighbour: &Neighbour) -> bool {
        neighbour.mac.is_some_and(|mac| self.neighbours.contains(&(neighbour.address, mac)))
    }

    fn has_remote(&self, fdb: &FdbEntry) -> bool {
        fdb.dst.is_some_and(|dst| self.remotes.contains(&(fdb.mac, dst)))
    }
}

/// The entries one peer needs, in the order the kernel needs them.
#[derive(Debug, Default)]
struct PeerEntries {
    fdb: Option<FdbEntry>,
    neighbours: Vec<Neighbour>,
    routes: Vec<Route>,
}

/// A peer's entries. A subnet goes direct when the peer's path is direct and the subnet is
/// of the underlay's family (a route's gateway is of its destination's family); any other
/// goes over the device. Without a device (`--backend direct`) such a subnet cannot be
/// routed and is left out (the agent refuses that configuration at start).
fn peer_entries(underlay: &Underlay, device: Option<&Device>, peer: &PeerRecord) -> PeerEntries {
    let mut entries = PeerEntries::default();
    for (subnet, vtep) in with_vteps(peer.subnet(), peer.subnet6()) {
        let same_family = subnet.addr().is_ipv4() == underlay.address.is_ipv4();
        if peer.path() == PeerPath::Direct && same_family {
            entries.routes.push(Route::new(subnet).gateway(peer.underlay()).oif(underlay.index));
        } else if let Some(device) = device.filter(|d| d.kind == DeviceKind::Wireguard) {
            // The device picks the peer by the packet's inner destination (the allowed
            // IPs); the gateway only keeps these routes recognisable as the overlay's.
            entries.routes.push(Route::new(subnet).gateway(vtep).oif(device.index).onlink());
        } else if let Some(device) = device {
            entries.fdb =
                Some(FdbEntry { index: device.index, mac: peer.vtep_mac(), dst: Some(peer.underlay()) });
            entries.neighbours.push(Neighbour::permanent(device.index, vtep, peer.vtep_mac()));
            entries.routes.push(Route::new(subnet).gateway(vtep).oif(device.index).onlink());
        }
    }
    entries
}

/// Whether a route in the kernel is one the overlay writes: via a gateway on the device,
/// or via a gateway on the underlay interface into a pod network (a direct route).
fn is_overlay_route(config: &Config, underlay: &Underlay, device: Option<&Device>, route: &Route) -> bool {
    let in_pod_network = match route.destination {
        IpNet::V4(dst) => config.network.contains(&dst),
        IpNet::V6(dst) => config.network6.is_some_and(|n| n.contains(&dst)),
    };
    route.gateway.is_some()
        && route.nexthops.is_empty()
        && (device.is_some_and(|d| route.oif == Some(d.index))
            || (route.oif == Some(underlay.index) && in_pod_network))
}

/// Makes the overlay's routes, permanent neighbours and FDB entries exactly those of
/// `peers`: missing ones are written, ones of peers that are gone (or that changed their
/// path, subnet or MAC) are removed.
///
/// Each peer (and each stale entry) is programmed on its own: a request the kernel refuses
/// is returned as a [`Failure`] and the others still converge; the caller retries later.
/// Only a failed dump (nothing can be compared then) is an error.
pub fn reconcile(
    nl: &mut Netlink,
    config: &Config,
    underlay: &Underlay,
    device: Option<&Device>,
    peers: &BTreeMap<Ipv4Net, PeerRecord>,
) -> Result<Vec<Failure>> {
    let mut failures = Vec::new();
    // What the peers want, as sets: the cost of a reconcile grows with the peers, not with
    // their square.
    let programs: Vec<(&PeerRecord, PeerEntries)> =
        peers.values().map(|p| (p, peer_entries(underlay, device, p))).collect();
    let wanted = Wanted::of(programs.iter().map(|(_, entries)| entries));
    // What is already right, from the same dumps: a peer all of whose entries are there is
    // not written again, so a change of one peer costs each node a dump and that peer's
    // writes, not three writes per peer (at 100 simulated nodes this halved a join's CPU
    // on each peer, 1.6 ms to 0.7 ms: docs/multi-host.md).
    let present = remove_stale(nl, config, underlay, device, &wanted, &mut failures)?;
    for (peer, entries) in programs.iter().filter(|(_, entries)| !present.has_all(entries)) {
        let outcome = program_peer(nl, entries);
        note(&mut failures, || format!("peer {} ({})", peer.node(), peer.subnet()), outcome);
    }
    Ok(failures)
}

/// One peer's change without reading the kernel's tables: the entries `old` implied that
/// `new` does not are removed (absent ones are no failure), then `new`'s are written.
/// `accepted` is every peer now believed: an FDB entry another accepted peer still needs
/// (two records naming one underlay) stays.
pub fn program_change(
    nl: &mut Netlink,
    underlay: &Underlay,
    device: Option<&Device>,
    accepted: &BTreeMap<Ipv4Net, PeerRecord>,
    old: Option<&PeerRecord>,
    new: Option<&PeerRecord>,
) -> Vec<Failure> {
    let mut failures = Vec::new();
    let new_entries = new.map(|peer| peer_entries(underlay, device, peer));
    if let Some(old) = old {
        let keep = Wanted::of(new_entries.iter());
        let shared_underlay =
            accepted.values().any(|p| p.underlay() == old.underlay() && p.subnet() != old.subnet());
        let stale = peer_entries(underlay, device, old);
        for route in stale.routes.iter().filter(|r| !keep.has_route(r)) {
            note(
                &mut failures,
                || format!("old route {}", route.destination),
                absent_is_fine(nl.delete_route(route)),
            );
        }
        for neighbour in stale.neighbours.iter().filter(|n| !keep.has_neighbour(n)) {
            let outcome = nl.delete_neighbour(neighbour.index, neighbour.address);
            note(&mut failures, || format!("old neighbour {}", neighbour.address), absent_is_fine(outcome));
        }
        if let Some(fdb) = stale.fdb.filter(|f| !keep.has_remote(f) && !shared_underlay) {
            note(&mut failures, || format!("old FDB entry {}", fdb.mac), absent_is_fine(nl.delete_fdb(&fdb)));
        }
    }
    if let (Some(peer), Some(entries)) = (new, &new_entries) {
        let outcome = program_peer(nl, entries);
        note(&mut failures, || format!("peer {} ({})", peer.node(), peer.subnet()), outcome);
    }
    failures
}

/// A removal of something already gone is what was wanted.
fn absent_is_fine(outcome: cni_net::Result<()>) -> cni_net::Result<()> {
    match outcome {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Records a failed kernel request; the others go on (the agent retries the lot later).
fn note(failures: &mut Vec<Failure>, subject: impl FnOnce() -> String, outcome: cni_net::Result<()>) {
    if let Err(error) = outcome {
        failures.push(Failure { subject: subject(), error });
    }
}

/// Removes the overlay's routes, neighbours and FDB entries no peer wants and returns
/// those that are wanted and already there. Removal comes first: a peer that came back
/// with another subnet, MAC or path must not leave its old entries next to the new ones.
fn remove_stale(
    nl: &mut Netlink,
    config: &Config,
    underlay: &Underlay,
    device: Option<&Device>,
    wanted: &Wanted,
    failures: &mut Vec<Failure>,
) -> Result<Wanted> {
    let mut present = Wanted::default();
    for family in [IpFamily::V4, IpFamily::V6] {
        for route in nl.routes(family, Some(MAIN_TABLE))? {
            let still = match (route.gateway, route.oif) {
                (Some(gateway), Some(oif)) => wanted.routes.contains(&(route.destination, gateway, oif)),
                _ => false,
            };
            if is_overlay_route(config, underlay, device, &route) && !still {
                let outcome = nl.delete_route(&route);
                note(failures, || format!("stale route {}", route.destination), outcome);
            } else if let (true, Some(gateway), Some(oif)) = (still, route.gateway, route.oif) {
                present.routes.insert((route.destination, gateway, oif));
            }
        }
    }
    if let Some(device) = device.filter(|d| d.kind == DeviceKind::Vxlan) {
        remove_stale_vxlan_entries(nl, device, wanted, &mut present, failures)?;
    }
    Ok(present)
}

/// [`remove_stale`] for the VXLAN device's permanent neighbours and FDB entries.
fn remove_stale_vxlan_entries(
    nl: &mut Netlink,
    device: &Device,
    wanted: &Wanted,
    present: &mut Wanted,
    failures: &mut Vec<Failure>,
) -> Result<()> {
    for family in [IpFamily::V4, IpFamily::V6] {
        for neighbour in nl.neighbours(family, Some(device.index))? {
            let still =
                neighbour.mac.is_some_and(|mac| wanted.neighbours.contains(&(neighbour.address, mac)));
            if neighbour.state == NeighbourState::Permanent && !still {
                let outcome = nl.delete_neighbour(device.index, neighbour.address);
                note(failures, || format!("stale neighbour {}", neighbour.address), outcome);
            } else if let (true, NeighbourState::Permanent, Some(mac)) =
                (still, neighbour.state, neighbour.mac)
            {
                present.neighbours.insert((neighbour.address, mac));
            }
        }
    }
    for entry in nl.fdb_entries(device.index)? {
        let still = entry.dst.is_some_and(|dst| wanted.remotes.contains(&(entry.mac, dst)));
        if entry.dst.is_some() && !still {
            let outcome = nl.delete_fdb(&entry);
            note(failures, || format!("stale FDB entry {}", entry.mac), outcome);
        } else if let (true, Some(dst)) = (still, entry.dst) {
            present.remotes.insert((entry.mac, dst));
        }
    }
    Ok(())
}

/// One peer's FDB entry, permanent neighbours and routes, in the order the routes need
/// them (a VXLAN route's gateway resolves through the neighbour, the neighbour's MAC
/// through the FDB).
fn program_peer(nl: &mut Netlink, entries: &PeerEntries) -> cni_net::Result<()> {
    if let Some(fdb) = &entries.fdb {
        nl.replace_fdb(fdb)?;
    }
    for neighbour in &entries.neighbours {
        nl.replace_neighbour(neighbour)?;
    }
    for route in &entries.routes {
        nl.replace_route(route)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation is part of the record's format (peers check a record's MAC against
    /// it): pinned.
    #[test]
    fn vtep_macs_are_pinned_distinct_and_locally_administered_unicast() {
        assert_eq!(vtep_mac(Ipv4Addr::new(192, 0, 2, 11)).to_string(), "0a:58:c0:00:02:0b");
        let one: Ipv6Addr = "2001:db8:1::5".parse().unwrap();
        let two: Ipv6Addr = "2001:db8:2::5".parse().unwrap();
        assert_eq!(vtep_mac(one).to_string(), PINNED_V6);
        assert_ne!(vtep_mac(one), vtep_mac(two), "same last bytes, different MACs");
        for mac in [vtep_mac(one), vtep_mac(two)] {
            assert_eq!(mac.octets()[0] & 0b11, 0b10, "{mac}: locally administered, unicast");
        }
    }

    /// The encapsulation's outer header is that of the underlay's family: 20 bytes more
    /// over IPv6 for both VXLAN and WireGuard.
    #[test]
    fn device_mtus_leave_room_for_the_underlays_outer_header() {
        let underlay = |address: &str| Underlay {
            index: 2,
            address: address.parse().unwrap(),
            mtu: 1500,
            onlink: vec![],
        };
        let (v4, v6) = (underlay("192.0.2.1"), underlay("2001:db8::1"));
        assert_eq!((v4.vxlan_mtu(), v6.vxlan_mtu()), (1450, 1430));
        assert_eq!((v4.wireguard_mtu(), v6.wireguard_mtu()), (1440, 1420));
    }

    // FNV-1a-64 of the 16 bytes of 2001:db8:1::5 is 0xc8b7fdbf8293d6a3 (checked with an
    // independent implementation).
    const PINNED_V6: &str = "0e:c8:b7:fd:bf:82";
}
