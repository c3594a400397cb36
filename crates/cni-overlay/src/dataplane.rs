//! The kernel side: the VXLAN device and, per peer, a route to its subnet via its VTEP
//! address (onlink), a permanent neighbour (VTEP address → VTEP MAC) and an FDB entry
//! (VTEP MAC → underlay address). Everything is written with replace semantics and
//! reconciled against the kernel's own dumps, so running it twice, or after a restart,
//! converges on the same state.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use cni_net::netlink::{
    AddressFlags, FdbEntry, IpFamily, LinkKind, LinkSpec, Neighbour, NeighbourState, Route, VxlanSpec,
    MAIN_TABLE,
};
use cni_net::{MacAddr, Netlink};
use ipnet::{IpNet, Ipv4Net};

use crate::config::Config;
use crate::peer::PeerRecord;
use crate::{Error, Result};

/// VXLAN's own headers over IPv4: outer IP (20) + UDP (8) + VXLAN (8) + inner Ethernet (14).
pub const VXLAN_OVERHEAD: u32 = 50;

/// The underlay interface the VXLAN packets leave by.
#[derive(Debug, Clone)]
pub struct Underlay {
    pub index: u32,
    pub address: Ipv4Addr,
    pub mtu: u32,
}

/// The node's VXLAN device.
#[derive(Debug, Clone)]
pub struct Device {
    pub index: u32,
    pub mac: MacAddr,
    pub mtu: u32,
}

/// The underlay interface's index, first IPv4 address and MTU.
pub fn underlay(nl: &mut Netlink, name: &str) -> Result<Underlay> {
    let link = nl.require_link(name)?;
    let address = nl
        .addresses(Some(link.index), Some(IpFamily::V4))?
        .into_iter()
        .find_map(|a| match a.address.addr() {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
        .ok_or_else(|| Error::Config(format!("--iface {name} has no IPv4 address")))?;
    Ok(Underlay { index: link.index, address, mtu: link.mtu })
}

/// A stable, locally administered MAC for a node's VTEP, derived from its underlay address
/// (the device keeps it when it is recreated, so peers' entries stay right).
pub fn vtep_mac(underlay: Ipv4Addr) -> MacAddr {
    let [a, b, c, d] = underlay.octets();
    MacAddr([0x0a, 0x58, a, b, c, d])
}

/// The node's VTEP address: the subnet's network address, as a /32 on the VXLAN device.
pub fn vtep_address(subnet: Ipv4Net) -> Ipv4Addr {
    subnet.network()
}

/// Creates the VXLAN device, or adopts the one a previous run left (its MAC is derived
/// from the underlay address, so the peers' FDB and neighbour entries stay valid), and
/// gives it the subnet's VTEP address.
pub fn ensure_device(
    nl: &mut Netlink,
    config: &Config,
    underlay: &Underlay,
    subnet: Ipv4Net,
) -> Result<Device> {
    let mtu = underlay.mtu - VXLAN_OVERHEAD;
    let existing = match nl.link_by_name(&config.device)? {
        Some(link) if link.kind != LinkKind::Vxlan => {
            return Err(Error::Config(format!("{} exists and is not a VXLAN device", config.device)))
        }
        other => other,
    };
    let link = match existing {
        Some(link) => link,
        None => {
            let spec = VxlanSpec {
                vni: config.vni,
                port: Some(config.port),
                local: Some(IpAddr::V4(underlay.address)),
                parent_index: Some(underlay.index),
                learning: Some(false),
                ..VxlanSpec::default()
            };
            nl.add_vxlan(&LinkSpec::new(&config.device).mac(vtep_mac(underlay.address)).mtu(mtu), &spec)?;
            nl.require_link(&config.device)?
        }
    };
    if link.mtu != mtu {
        nl.set_link_mtu(link.index, mtu)?;
    }
    // The MAC the node's record announces; a device made by hand may differ.
    let mac = vtep_mac(underlay.address);
    if link.mac != Some(mac) {
        nl.set_link_mac(link.index, mac)?;
    }
    let vtep = IpNet::V4(Ipv4Net::new(vtep_address(subnet), 32).expect("/32"));
    for stale in nl.addresses(Some(link.index), Some(IpFamily::V4))? {
        if stale.address != vtep {
            nl.delete_address(link.index, stale.address)?;
        }
    }
    nl.replace_address(link.index, vtep, AddressFlags::empty())?;
    nl.set_link_up(link.index)?;
    Ok(Device { index: link.index, mac, mtu })
}

fn peer_route(device: &Device, subnet: Ipv4Net) -> Route {
    Route::new(IpNet::V4(subnet)).gateway(IpAddr::V4(vtep_address(subnet))).oif(device.index).onlink()
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

/// Makes the device's routes, permanent neighbours and FDB entries exactly those of
/// `peers`: missing ones are written, ones of peers that are gone are removed.
///
/// Each peer (and each stale entry) is programmed on its own: a request the kernel refuses
/// is returned as a [`Failure`] and the others still converge; the caller retries later.
/// Only a failed dump (nothing can be compared then) is an error.
pub fn reconcile(
    nl: &mut Netlink,
    device: &Device,
    peers: &BTreeMap<Ipv4Net, PeerRecord>,
) -> Result<Vec<Failure>> {
    let mut failures = Vec::new();
    let mut attempt = |subject: &dyn Fn() -> String, outcome: cni_net::Result<()>| {
        if let Err(error) = outcome {
            failures.push(Failure { subject: subject(), error });
        }
    };
    // Remove first: a peer that came back with another subnet or MAC must not leave its
    // old entries next to the new ones.
    for route in nl.routes(IpFamily::V4, Some(MAIN_TABLE))? {
        let ours = route.oif == Some(device.index) && route.gateway.is_some();
        let still = matches!(route.destination, IpNet::V4(dst) if peers.contains_key(&dst));
        if ours && !still {
            let outcome = nl.delete_route(&route);
            attempt(&|| format!("stale route {}", route.destination), outcome);
        }
    }
    // What the peers want, as sets: the cost of a reconcile grows with the peers, not with
    // their square.
    let neighbours: HashSet<(IpAddr, MacAddr)> =
        peers.values().map(|p| (IpAddr::V4(vtep_address(p.subnet())), p.vtep_mac())).collect();
    let remotes: HashSet<(MacAddr, IpAddr)> =
        peers.values().map(|p| (p.vtep_mac(), IpAddr::V4(p.underlay()))).collect();
    for neighbour in nl.neighbours(IpFamily::V4, Some(device.index))? {
        let still = neighbour.mac.is_some_and(|mac| neighbours.contains(&(neighbour.address, mac)));
        if neighbour.state == NeighbourState::Permanent && !still {
            let outcome = nl.delete_neighbour(device.index, neighbour.address);
            attempt(&|| format!("stale neighbour {}", neighbour.address), outcome);
        }
    }
    for entry in nl.fdb_entries(device.index)? {
        let still = entry.dst.is_some_and(|dst| remotes.contains(&(entry.mac, dst)));
        if entry.dst.is_some() && !still {
            let outcome = nl.delete_fdb(&entry);
            attempt(&|| format!("stale FDB entry {}", entry.mac), outcome);
        }
    }
    for peer in peers.values() {
        let outcome = program_peer(nl, device, peer);
        attempt(&|| format!("peer {} ({})", peer.node(), peer.subnet()), outcome);
    }
    Ok(failures)
}

/// The FDB entry, permanent neighbour and route of one peer, in the order the route needs
/// them (its gateway resolves through the neighbour, the neighbour's MAC through the FDB).
fn program_peer(nl: &mut Netlink, device: &Device, peer: &PeerRecord) -> cni_net::Result<()> {
    let mac = peer.vtep_mac();
    nl.replace_fdb(&FdbEntry { index: device.index, mac, dst: Some(IpAddr::V4(peer.underlay())) })?;
    nl.replace_neighbour(&Neighbour::permanent(device.index, IpAddr::V4(vtep_address(peer.subnet())), mac))?;
    nl.replace_route(&peer_route(device, peer.subnet()))
}
