//! Neighbour (ARP / NDP) entries.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
pub use netlink_packet_route::neighbour::NeighbourState;
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::route::RouteType;
use netlink_packet_route::RouteNetlinkMessage;

use super::addr::IpFamily;
use super::{context, Netlink};
use crate::error::Result;
use crate::mac::MacAddr;

/// A neighbour table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Interface index.
    pub index: u32,
    pub address: IpAddr,
    pub mac: Option<MacAddr>,
    pub state: NeighbourState,
}

impl Neighbour {
    /// A permanent entry, as `ip neigh replace ... nud permanent` makes.
    pub fn permanent(index: u32, address: IpAddr, mac: MacAddr) -> Neighbour {
        Neighbour { index, address, mac: Some(mac), state: NeighbourState::Permanent }
    }

    fn to_message(&self) -> NeighbourMessage {
        let mut message = NeighbourMessage::default();
        message.header.family = IpFamily::to_netlink(Some(IpFamily::of(self.address)));
        message.header.ifindex = self.index;
        message.header.state = self.state;
        message.header.kind = RouteType::Unicast;
        message.attributes.push(NeighbourAttribute::Destination(match self.address {
            IpAddr::V4(addr) => NeighbourAddress::Inet(addr),
            IpAddr::V6(addr) => NeighbourAddress::Inet6(addr),
        }));
        if let Some(mac) = self.mac {
            message.attributes.push(NeighbourAttribute::LinkLayerAddress(mac.0.to_vec()));
        }
        message
    }

    pub(crate) fn from_message(message: &NeighbourMessage) -> Option<Neighbour> {
        let mut address = None;
        let mut mac = None;
        for attribute in &message.attributes {
            match attribute {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(addr)) => {
                    address = Some(IpAddr::V4(*addr))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(addr)) => {
                    address = Some(IpAddr::V6(*addr))
                }
                NeighbourAttribute::LinkLayerAddress(bytes) => mac = MacAddr::from_slice(bytes),
                _ => {}
            }
        }
        Some(Neighbour { index: message.header.ifindex, address: address?, mac, state: message.header.state })
    }
}

impl Netlink {
    /// Adds or replaces a neighbour entry.
    pub fn replace_neighbour(&mut self, neighbour: &Neighbour) -> Result<()> {
        context(
            self.request(
                RouteNetlinkMessage::NewNeighbour(neighbour.to_message()),
                NLM_F_CREATE | NLM_F_REPLACE,
            ),
            || format!("set neighbour {} on link #{}", neighbour.address, neighbour.index),
        )
    }

    /// Deletes a neighbour entry (`ENOENT` if absent).
    pub fn delete_neighbour(&mut self, index: u32, address: IpAddr) -> Result<()> {
        let entry = Neighbour { index, address, mac: None, state: NeighbourState::None };
        context(self.request(RouteNetlinkMessage::DelNeighbour(entry.to_message()), 0), || {
            format!("delete neighbour {address} on link #{index}")
        })
    }

    /// Lists neighbour entries of a family, optionally of one link.
    pub fn neighbours(&mut self, family: IpFamily, index: Option<u32>) -> Result<Vec<Neighbour>> {
        let mut request = NeighbourMessage::default();
        request.header.family = IpFamily::to_netlink(Some(family));
        // Strict dump checking wants the filter as NDA_IFINDEX, the header's index zero.
        if let Some(index) = index {
            request.attributes.push(NeighbourAttribute::IfIndex(index));
        }
        let replies = context(self.dump(RouteNetlinkMessage::GetNeighbour(request)), || {
            format!("list {family:?} neighbours")
        })?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewNeighbour(message) => Neighbour::from_message(message),
                _ => None,
            })
            .filter(|entry| index.is_none_or(|index| entry.index == index))
            .collect())
    }
}
