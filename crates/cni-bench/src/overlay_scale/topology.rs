//! The simulated machines: one underlay namespace holding a bridge, and per node a
//! namespace whose `scu0` is a veth port on that bridge (one L2 segment, `172.31.0.0/16`).
//! Every namespace is a [`TestNetns`]: removed when dropped, and the veths go with it.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use cni_net::netlink::{AddressFlags, BridgeOptions, LinkSpec, VethSpec};
use cni_net::{MacAddr, Netlink};
use cni_testkit::ns::TestNetns;
use ipnet::{IpNet, Ipv4Net};

use super::Result;

/// The underlay interface in each node's namespace.
pub const UNDERLAY_IF: &str = "scu0";
/// The name prefix of everything the simulation makes (namespaces, links, directories).
pub const PREFIX: &str = "sc";

/// Node `i`'s underlay address: `172.31.0.1` onwards, up to 250 per /24 of the /16.
pub fn underlay_address(i: usize) -> Ipv4Net {
    let (high, low) = (i / 250, i % 250 + 1);
    let high = u8::try_from(high).expect("at most 64,000 nodes");
    Ipv4Net::new(Ipv4Addr::new(172, 31, high, low as u8), 16).expect("a /16")
}

/// One simulated machine.
pub struct Node {
    pub name: String,
    pub ns: TestNetns,
    pub underlay: Ipv4Addr,
    /// Where its agent keeps the subnet file and its log.
    pub dir: PathBuf,
    /// A netlink socket in the node's namespace, kept open for the observer's dumps.
    pub netlink: Netlink,
}

impl Node {
    pub fn subnet_file(&self) -> PathBuf {
        self.dir.join("subnet.env")
    }

    pub fn log_file(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    /// The subnet its agent wrote to its subnet file (None before the agent holds one).
    pub fn subnet(&self) -> Option<Ipv4Net> {
        cni_overlay::cniconf::read_subnet(&self.subnet_file())
    }
}

/// The underlay and the nodes on it. Dropping it removes every namespace.
pub struct Topology {
    // Nodes first: their namespaces go before the underlay's (field order is drop order).
    pub nodes: Vec<Node>,
    _underlay: TestNetns,
}

impl Topology {
    /// `count` nodes on one bridge; each node's directory is made under `dir`.
    pub fn build(count: usize, dir: &std::path::Path) -> Result<Topology> {
        let underlay = TestNetns::with_prefix(&format!("{PREFIX}u"))?;
        let mut unl = underlay.netlink()?;
        // A fixed MAC: a bridge otherwise takes its lowest port's and changes it as ports
        // come and go.
        let spec = LinkSpec::new(format!("{PREFIX}br")).mac(MacAddr([0x02, 0, 0, 0, 0x5c, 1]));
        unl.add_bridge(&spec, &BridgeOptions::default())?;
        let bridge = unl.require_link(&format!("{PREFIX}br"))?.index;
        unl.set_link_up(bridge)?;
        let mut nodes = Vec::with_capacity(count);
        for i in 0..count {
            let ns = TestNetns::with_prefix(&format!("{PREFIX}h"))?;
            let port = format!("{PREFIX}p{i}");
            unl.add_veth(&VethSpec {
                link: LinkSpec::new(&port),
                peer: LinkSpec::new(UNDERLAY_IF).netns(ns.netns()),
            })?;
            let port = unl.require_link(&port)?.index;
            unl.set_link_master(port, bridge)?;
            unl.set_link_up(port)?;
            let address = underlay_address(i);
            let mut netlink = ns.netlink()?;
            let link = netlink.require_link(UNDERLAY_IF)?.index;
            netlink.add_address(link, IpNet::V4(address), AddressFlags::Nodad)?;
            netlink.set_link_up(link)?;
            let name = format!("{PREFIX}-n{i:03}");
            let node_dir = dir.join(&name);
            std::fs::create_dir_all(&node_dir)?;
            nodes.push(Node { name, ns, underlay: address.addr(), dir: node_dir, netlink });
        }
        Ok(Topology { nodes, _underlay: underlay })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn underlay_addresses_are_distinct_and_skip_network_and_broadcast_octets() {
        assert_eq!(underlay_address(0).addr(), Ipv4Addr::new(172, 31, 0, 1));
        assert_eq!(underlay_address(249).addr(), Ipv4Addr::new(172, 31, 0, 250));
        assert_eq!(underlay_address(250).addr(), Ipv4Addr::new(172, 31, 1, 1));
        let all: std::collections::BTreeSet<_> = (0..1000).map(underlay_address).collect();
        assert_eq!(all.len(), 1000);
    }
}
