//! Forwarding-database entries of a VXLAN device (`bridge fdb ... self`): which underlay
//! address (VTEP) receives the frames for a given MAC. An overlay writes one per peer so
//! the device never floods or learns.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::RouteType;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{context, Netlink};
use crate::error::Result;
use crate::mac::MacAddr;

/// One FDB entry of a device: frames for `mac` go to the VTEP at `dst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdbEntry {
    pub index: u32,
    pub mac: MacAddr,
    pub dst: Option<IpAddr>,
}

impl FdbEntry {
    fn to_message(&self) -> NeighbourMessage {
        let mut message = NeighbourMessage::default();
        message.header.family = AddressFamily::Bridge;
        message.header.ifindex = self.index;
        message.header.state = NeighbourState::Permanent;
        // NTF_SELF: the entry belongs to the device itself (the VXLAN's own table), not to
        // a bridge it might be a port of.
        message.header.flags = NeighbourFlags::Own;
        message.header.kind = RouteType::Unicast;
        message.attributes.push(NeighbourAttribute::LinkLayerAddress(self.mac.0.to_vec()));
        if let Some(dst) = self.dst {
            message.attributes.push(NeighbourAttribute::Destination(match dst {
                IpAddr::V4(addr) => NeighbourAddress::Inet(addr),
                IpAddr::V6(addr) => NeighbourAddress::Inet6(addr),
            }));
        }
        message
    }

    fn from_message(message: &NeighbourMessage) -> Option<FdbEntry> {
        let mut mac = None;
        let mut dst = None;
        for attribute in &message.attributes {
            match attribute {
                NeighbourAttribute::LinkLayerAddress(bytes) => mac = MacAddr::from_slice(bytes),
                NeighbourAttribute::Destination(NeighbourAddress::Inet(addr)) => {
                    dst = Some(IpAddr::V4(*addr))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(addr)) => {
                    dst = Some(IpAddr::V6(*addr))
                }
                // In an AF_BRIDGE dump the VTEP address comes raw: 4 or 16 bytes.
                NeighbourAttribute::Destination(NeighbourAddress::Other(bytes)) => {
                    dst = match bytes.len() {
                        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes.as_slice()).expect("4 bytes"))),
                        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes.as_slice()).expect("16 bytes"))),
                        _ => None,
                    }
                }
                _ => {}
            }
        }
        Some(FdbEntry { index: message.header.ifindex, mac: mac?, dst })
    }
}

impl Netlink {
    /// Adds or replaces the device's entry for `entry.mac`.
    pub fn replace_fdb(&mut self, entry: &FdbEntry) -> Result<()> {
        context(
            self.request(RouteNetlinkMessage::NewNeighbour(entry.to_message()), NLM_F_CREATE | NLM_F_REPLACE),
            || format!("set fdb entry {} on link #{}", entry.mac, entry.index),
        )
    }

    /// Deletes the device's entry for `entry.mac` (to `entry.dst`); `ENOENT` if absent.
    pub fn delete_fdb(&mut self, entry: &FdbEntry) -> Result<()> {
        context(self.request(RouteNetlinkMessage::DelNeighbour(entry.to_message()), 0), || {
            format!("delete fdb entry {} on link #{}", entry.mac, entry.index)
        })
    }

    /// The FDB entries of device `index`.
    pub fn fdb_entries(&mut self, index: u32) -> Result<Vec<FdbEntry>> {
        let mut request = NeighbourMessage::default();
        request.header.family = AddressFamily::Bridge;
        request.attributes.push(NeighbourAttribute::IfIndex(index));
        let replies = context(self.dump(RouteNetlinkMessage::GetNeighbour(request)), || {
            format!("list fdb of link #{index}")
        })?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewNeighbour(message) => FdbEntry::from_message(message),
                _ => None,
            })
            .filter(|entry| entry.index == index)
            .collect())
    }
}
