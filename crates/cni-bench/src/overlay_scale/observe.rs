//! What a node's kernel has programmed for its peers, from netlink dumps of its namespace
//! (never from the agents' logs): the VXLAN device's routes, permanent neighbours and FDB
//! entries, each checked against exactly what a peer needs.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use cni_net::netlink::{IpFamily, NeighbourState, MAIN_TABLE};
use cni_net::Netlink;
use cni_overlay::dataplane::{vtep_address, vtep_mac};
use ipnet::{IpNet, Ipv4Net};

use super::agent::DEVICE;
use super::Result;

/// A MAC's octets (ordered, so the entries sit in sets).
type Mac = [u8; 6];

/// A node as its peers must see it: its pod subnet behind its underlay address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Peer {
    pub subnet: Ipv4Net,
    pub underlay: Ipv4Addr,
}

/// The entries one node's kernel holds on its VXLAN device.
#[derive(Debug, Default)]
pub struct Programmed {
    /// (destination, gateway) of the device's routes.
    routes: BTreeSet<(IpNet, IpAddr)>,
    /// (address, MAC) of its permanent neighbours.
    neighbours: BTreeSet<(IpAddr, Mac)>,
    /// (MAC, remote) of its FDB entries with a remote.
    fdb: BTreeSet<(Mac, IpAddr)>,
}

impl Programmed {
    /// Dumps the device's entries; empty while the device does not exist yet.
    pub fn dump(nl: &mut Netlink) -> Result<Programmed> {
        let Some(device) = nl.link_by_name(DEVICE)? else {
            return Ok(Programmed::default());
        };
        let routes = nl
            .routes(IpFamily::V4, Some(MAIN_TABLE))?
            .into_iter()
            .filter(|r| r.oif == Some(device.index))
            .filter_map(|r| Some((r.destination, r.gateway?)))
            .collect();
        let neighbours = nl
            .neighbours(IpFamily::V4, Some(device.index))?
            .into_iter()
            .filter(|n| n.state == NeighbourState::Permanent)
            .filter_map(|n| Some((n.address, n.mac?.0)))
            .collect();
        let fdb = nl.fdb_entries(device.index)?.into_iter().filter_map(|f| Some((f.mac.0, f.dst?))).collect();
        Ok(Programmed { routes, neighbours, fdb })
    }

    /// Whether all three entries `peer` needs are there, each pointing the right way: the
    /// route to its subnet via its VTEP, the VTEP's MAC, that MAC's underlay address.
    pub fn has(&self, peer: &Peer) -> bool {
        let vtep = IpAddr::V4(vtep_address(peer.subnet));
        let mac = vtep_mac(peer.underlay).0;
        self.routes.contains(&(IpNet::V4(peer.subnet), vtep))
            && self.neighbours.contains(&(vtep, mac))
            && self.fdb.contains(&(mac, IpAddr::V4(peer.underlay)))
    }

    /// Whether nothing of `peer` is left (after it left).
    pub fn has_none_of(&self, peer: &Peer) -> bool {
        let vtep = IpAddr::V4(vtep_address(peer.subnet));
        let mac = vtep_mac(peer.underlay).0;
        !self.routes.iter().any(|(destination, _)| *destination == IpNet::V4(peer.subnet))
            && !self.neighbours.iter().any(|(address, _)| *address == vtep)
            && !self.fdb.iter().any(|(m, _)| *m == mac)
    }

    /// Whether it holds exactly `peers`' entries and nothing else.
    pub fn is_exactly(&self, peers: &[Peer]) -> bool {
        let counts = (self.routes.len(), self.neighbours.len(), self.fdb.len());
        counts == (peers.len(), peers.len(), peers.len()) && peers.iter().all(|p| self.has(p))
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        (self.routes.len(), self.neighbours.len(), self.fdb.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u8) -> Peer {
        Peer { subnet: format!("10.244.{i}.0/24").parse().unwrap(), underlay: Ipv4Addr::new(172, 31, 0, i) }
    }

    /// What the agent programs for `peer`, or with a wrong part.
    fn entries(peers: &[Peer]) -> Programmed {
        let mut programmed = Programmed::default();
        for p in peers {
            let vtep = IpAddr::V4(vtep_address(p.subnet));
            let mac = vtep_mac(p.underlay).0;
            programmed.routes.insert((IpNet::V4(p.subnet), vtep));
            programmed.neighbours.insert((vtep, mac));
            programmed.fdb.insert((mac, IpAddr::V4(p.underlay)));
        }
        programmed
    }

    #[test]
    fn a_peer_counts_only_with_all_three_entries_right() {
        let (a, b) = (peer(1), peer(2));
        let both = entries(&[a, b]);
        assert!(both.has(&a) && both.has(&b) && both.is_exactly(&[a, b]));
        assert!(!both.is_exactly(&[a]), "an extra peer's entries are not exactly the one");
        assert!(!both.has_none_of(&a));
        assert!(entries(&[b]).has_none_of(&a));

        // The FDB entry pointing at another underlay address, or no neighbour: not there.
        let mut wrong = entries(&[a]);
        wrong.fdb = [(vtep_mac(a.underlay).0, IpAddr::V4(Ipv4Addr::new(172, 31, 0, 9)))].into();
        assert!(!wrong.has(&a) && !wrong.has_none_of(&a));
        let mut partial = entries(&[a]);
        partial.neighbours.clear();
        assert!(!partial.has(&a) && !partial.has_none_of(&a));
        assert_eq!(partial.counts(), (1, 0, 1));
    }
}
