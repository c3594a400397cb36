//! Reading the autoconfiguration's outcome from the kernel: which addresses on the
//! interface came from router advertisements and are usable, and which router is the
//! default one. Everything here was decided by a router on the link, so it is filtered,
//! not trusted.

use cni_net::netlink::{AddressFlags, IpAddress, Route, RouteProtocol};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv6Addr};

/// The interface identifier's length on Ethernet: the only prefix length the kernel
/// autoconfigures there (RFC 4862 5.5.3 d), checked again rather than assumed.
pub const AUTOCONF_PREFIX_LEN: u8 = 64;

/// Where an autoconfigured address stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Global, DAD done, preferred: a result may name it.
    Usable,
    /// Still in duplicate address detection.
    Tentative,
    /// Failed DAD, deprecated (preferred lifetime 0), or of a length SLAAC does not make.
    Unusable,
}

/// Whether `a` is an address the kernel made from a router's prefix: global IPv6, with
/// lifetimes (not permanent), not a privacy (temporary) address.
pub fn is_autoconfigured(a: &IpAddress) -> bool {
    matches!(a.address, IpNet::V6(_))
        && a.scope == 0
        && !a.flags.contains(AddressFlags::Permanent)
        // IFA_F_TEMPORARY shares its bit with IFA_F_SECONDARY, the name the crate gives it.
        && !a.flags.contains(AddressFlags::Secondary)
}

pub fn state(a: &IpAddress) -> State {
    // A preferred lifetime of 0 is checked as well as the flag: the kernel marks a new
    // address deprecated only when its lifetime timer next runs.
    if a.flags.intersects(AddressFlags::Dadfailed | AddressFlags::Deprecated)
        || a.preferred_lifetime == Some(0)
        || a.address.prefix_len() != AUTOCONF_PREFIX_LEN
    {
        State::Unusable
    } else if a.flags.intersects(AddressFlags::Tentative | AddressFlags::Optimistic) {
        State::Tentative
    } else {
        State::Usable
    }
}

/// Whether the link-local address is usable as a source (a solicitation needs one).
pub fn has_link_local(addresses: &[IpAddress]) -> bool {
    addresses.iter().any(|a| match a.address.addr() {
        IpAddr::V6(v6) => v6.is_unicast_link_local() && !a.flags.intersects(AddressFlags::Tentative),
        IpAddr::V4(_) => false,
    })
}

/// The autoconfigured addresses of `addresses` in one state, at most `limit`.
pub fn in_state(addresses: &[IpAddress], wanted: State, limit: usize) -> Vec<IpNet> {
    addresses
        .iter()
        .filter(|a| is_autoconfigured(a) && state(a) == wanted)
        .map(|a| a.address)
        .take(limit)
        .collect()
}

/// The router a default route learnt from advertisements on link `index` goes through
/// (the one with the lowest metric): a link-local address, as RFC 4861 requires of an
/// advertisement's source. A router advertising with lifetime 0 is no default router, and
/// there is none.
pub fn default_router(routes: &[Route], index: u32) -> Option<Ipv6Addr> {
    routes
        .iter()
        .filter(|r| r.is_default() && r.oif == Some(index) && r.protocol == RouteProtocol::Ra)
        .filter_map(|r| match r.gateway {
            Some(IpAddr::V6(gw)) if gw.is_unicast_link_local() => Some((r.priority.unwrap_or(0), gw)),
            _ => None,
        })
        .min()
        .map(|(_, gw)| gw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_net::netlink::IpFamily;

    fn address(text: &str, flags: AddressFlags) -> IpAddress {
        let address: IpNet = text.parse().unwrap();
        let scope = if address.addr().to_string().starts_with("fe80") { 253 } else { 0 };
        IpAddress { index: 2, address, flags, scope, label: None, preferred_lifetime: Some(3600) }
    }

    #[test]
    fn only_preferred_slaac_addresses_of_length_64_are_usable() {
        let all = [
            address("2001:db8:1::5/64", AddressFlags::Managetempaddr),
            address("2001:db8:2::5/64", AddressFlags::Tentative),
            address("2001:db8:3::5/64", AddressFlags::Deprecated),
            address("2001:db8:4::5/64", AddressFlags::Dadfailed | AddressFlags::Tentative),
            address("2001:db8:5::5/80", AddressFlags::empty()),
            address("2001:db8:6::5/64", AddressFlags::Permanent),
            address("2001:db8:7::5/64", AddressFlags::Secondary),
            address("fe80::5/64", AddressFlags::Permanent),
        ];
        assert_eq!(in_state(&all, State::Usable, 16), vec!["2001:db8:1::5/64".parse::<IpNet>().unwrap()]);
        assert_eq!(in_state(&all, State::Tentative, 16), vec!["2001:db8:2::5/64".parse::<IpNet>().unwrap()]);
        assert_eq!(in_state(&all, State::Usable, 0), Vec::<IpNet>::new());
        let mut expired = address("2001:db8:8::5/64", AddressFlags::empty());
        expired.preferred_lifetime = Some(0);
        assert_eq!(state(&expired), State::Unusable);
        assert!(has_link_local(&all));
        assert!(!has_link_local(&[address("fe80::5/64", AddressFlags::Tentative)]));
    }

    #[test]
    fn the_default_router_is_a_link_local_ra_route_on_the_link() {
        let ra = |gw: &str, metric: u32| {
            let mut r = Route::default_route(IpFamily::V6)
                .oif(2)
                .gateway(gw.parse().unwrap())
                .protocol(RouteProtocol::Ra);
            r.priority = Some(metric);
            r
        };
        let static_route = Route::default_route(IpFamily::V6).oif(2).gateway("fe80::9".parse().unwrap());
        let global_gw = ra("2001:db8::1", 1);
        let other_link = ra("fe80::7", 1).oif(3);
        assert_eq!(default_router(&[static_route.clone(), global_gw.clone(), other_link.clone()], 2), None);
        let routes = [static_route, global_gw, other_link, ra("fe80::2", 1024), ra("fe80::1", 512)];
        assert_eq!(default_router(&routes, 2), Some("fe80::1".parse().unwrap()));
    }
}
