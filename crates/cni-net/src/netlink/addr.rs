//! Interface addresses.

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
pub use netlink_packet_route::address::AddressFlags;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage, AddressScope};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{context, Netlink};
use crate::error::{Error, Result};

/// IPv4 or IPv6, for filtering listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(addr: IpAddr) -> IpFamily {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub(crate) fn to_netlink(family: Option<IpFamily>) -> AddressFamily {
        match family {
            None => AddressFamily::Unspec,
            Some(IpFamily::V4) => AddressFamily::Inet,
            Some(IpFamily::V6) => AddressFamily::Inet6,
        }
    }
}

/// An address on an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpAddress {
    /// Interface index.
    pub index: u32,
    /// Address with its prefix length (e.g. `10.1.0.2/24`).
    pub address: IpNet,
    /// `IFA_F_*` flags (e.g. `Nodad`, `Noprefixroute`, `Tentative`, `Permanent`).
    pub flags: AddressFlags,
    /// Scope; 0 universe, 253 link, 254 host.
    pub scope: u8,
    pub label: Option<String>,
    /// Seconds left of the preferred lifetime (`IFA_CACHEINFO`; `u32::MAX`: forever), when
    /// the kernel gave one. 0 is a deprecated address, whatever its flags say yet.
    pub preferred_lifetime: Option<u32>,
}

impl IpAddress {
    pub(crate) fn from_message(message: &AddressMessage) -> Option<IpAddress> {
        let mut address = None;
        let mut local = None;
        let mut flags = AddressFlags::from_bits_retain(message.header.flags.bits() as u32);
        let mut label = None;
        let mut preferred_lifetime = None;
        for attribute in &message.attributes {
            match attribute {
                AddressAttribute::Address(addr) => address = Some(*addr),
                AddressAttribute::Local(addr) => local = Some(*addr),
                AddressAttribute::Flags(all) => flags = *all,
                AddressAttribute::Label(text) => label = Some(text.clone()),
                AddressAttribute::CacheInfo(info) => preferred_lifetime = Some(info.ifa_preferred),
                _ => {}
            }
        }
        // On point-to-point links IFA_ADDRESS is the peer; IFA_LOCAL is ours.
        let addr = local.or(address)?;
        Some(IpAddress {
            index: message.header.index,
            address: IpNet::new(addr, message.header.prefix_len).ok()?,
            flags,
            scope: u8::from(message.header.scope),
            label,
            preferred_lifetime,
        })
    }
}

fn address_message(index: u32, address: IpNet) -> AddressMessage {
    let mut message = AddressMessage::default();
    message.header.index = index;
    message.header.prefix_len = address.prefix_len();
    message.header.family = IpFamily::to_netlink(Some(IpFamily::of(address.addr())));
    message.header.scope = AddressScope::Universe;
    message.attributes.push(AddressAttribute::Local(address.addr()));
    message.attributes.push(AddressAttribute::Address(address.addr()));
    message
}

impl Netlink {
    /// Adds an address to a link. `flags` are e.g. [`AddressFlags::Nodad`] (skip IPv6 DAD)
    /// or [`AddressFlags::Noprefixroute`]. An IPv4 address gets the usual broadcast address.
    /// Adding an address that is already there fails with `EEXIST`.
    pub fn add_address(&mut self, index: u32, address: IpNet, flags: AddressFlags) -> Result<()> {
        self.write_address(index, address, flags, NLM_F_CREATE | NLM_F_EXCL, "add")
    }

    /// Adds an address or updates the flags of an existing identical one.
    pub fn replace_address(&mut self, index: u32, address: IpNet, flags: AddressFlags) -> Result<()> {
        self.write_address(index, address, flags, NLM_F_CREATE | NLM_F_REPLACE, "replace")
    }

    fn write_address(
        &mut self,
        index: u32,
        address: IpNet,
        flags: AddressFlags,
        request_flags: u16,
        verb: &str,
    ) -> Result<()> {
        let mut message = address_message(index, address);
        message.header.flags = AddressHeaderFlags::from_bits_truncate(flags.bits() as u8);
        message.attributes.push(AddressAttribute::Flags(flags));
        if let IpNet::V4(net) = address {
            if net.prefix_len() < 31 {
                message.attributes.push(AddressAttribute::Broadcast(net.broadcast()));
            }
        }
        context(self.request(RouteNetlinkMessage::NewAddress(message), request_flags), || {
            format!("{verb} address {address} on link #{index}")
        })
    }

    /// Removes an address from a link (`EADDRNOTAVAIL` if it is not there).
    pub fn delete_address(&mut self, index: u32, address: IpNet) -> Result<()> {
        let message = address_message(index, address);
        context(self.request(RouteNetlinkMessage::DelAddress(message), 0), || {
            format!("delete address {address} from link #{index}")
        })
    }

    /// Lists addresses, optionally only of one link and/or one family.
    pub fn addresses(&mut self, index: Option<u32>, family: Option<IpFamily>) -> Result<Vec<IpAddress>> {
        let mut request = AddressMessage::default();
        request.header.family = IpFamily::to_netlink(family);
        request.header.index = index.unwrap_or(0);
        let replies =
            context(self.dump(RouteNetlinkMessage::GetAddress(request)), || "list addresses".to_string())?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewAddress(message) => IpAddress::from_message(message),
                _ => None,
            })
            // Filter again: kernels without strict checking ignore the request's filters.
            .filter(|addr| index.is_none_or(|index| addr.index == index))
            .filter(|addr| family.is_none_or(|family| IpFamily::of(addr.address.addr()) == family))
            .collect())
    }
}

/// Parses `a.b.c.d/len` or `x::y/len`; for callers building requests from text.
pub fn parse_ipnet(text: &str) -> Result<IpNet> {
    text.parse::<IpNet>().map_err(|_| Error::InvalidArgument(format!("invalid CIDR {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_round_trips_through_message() {
        let net: IpNet = "10.1.2.3/24".parse().unwrap();
        let mut message = address_message(4, net);
        message.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
        let parsed = IpAddress::from_message(&message).unwrap();
        assert_eq!(parsed.address, net);
        assert_eq!(parsed.index, 4);
        assert!(parsed.flags.contains(AddressFlags::Nodad));
        assert_eq!(message.header.family, AddressFamily::Inet);
    }

    #[test]
    fn families_are_told_apart() {
        assert_eq!(IpFamily::of("::1".parse().unwrap()), IpFamily::V6);
        assert_eq!(IpFamily::of("127.0.0.1".parse().unwrap()), IpFamily::V4);
        assert!(parse_ipnet("10.0.0.0/33").is_err());
    }
}
