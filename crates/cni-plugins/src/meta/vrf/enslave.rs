//! Moving an interface into a VRF and out again, with its routes and addresses.
//!
//! Changing an interface's master makes the kernel cycle it down and up: on the way down
//! it flushes every route through the interface and, unless `keep_addr_on_down` is set,
//! its IPv6 addresses; on the way up it re-creates only the connected and local routes
//! of the addresses that are left, in the table of the interface's new master (the main
//! table when it has none). So the other routes (an IPAM plugin's gateway and extra
//! routes) and the global IPv6 addresses are read first and put back afterwards, in the
//! new table: routes follow the interface into the VRF on ADD and back on DEL.

use crate::common::NetResultExt;
use cni_net::netlink::{AddressFlags, IpAddress, IpFamily, Route, RouteProtocol, RouteType, Vrf, MAIN_TABLE};
use cni_net::{Idempotent, Link, Netlink};
use cni_sdk::CniError;

/// What the master change would lose: read before it, put back after it.
struct Carried {
    routes: Vec<Route>,
    ipv6: Vec<IpAddress>,
}

/// The routes of `link` in `table` the kernel will not re-create (it re-creates its own,
/// protocol `kernel`), and its global IPv6 addresses. Multipath routes are left alone:
/// they belong to more than this interface.
fn carried(nl: &mut Netlink, link: &Link, table: u32) -> Result<Carried, CniError> {
    let mut routes = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        routes.extend(nl.routes(family, Some(table)).or_cni("list routes")?.into_iter().filter(|r| {
            r.oif == Some(link.index)
                && r.nexthops.is_empty()
                && r.protocol != RouteProtocol::Kernel
                && r.kind == RouteType::Unicast
        }));
    }
    let ipv6 = global_ipv6(nl, link)?;
    Ok(Carried { routes, ipv6 })
}

fn global_ipv6(nl: &mut Netlink, link: &Link) -> Result<Vec<IpAddress>, CniError> {
    Ok(nl
        .addresses(Some(link.index), Some(IpFamily::V6))
        .or_cni("list the interface's IPv6 addresses")?
        .into_iter()
        .filter(|a| a.scope == 0)
        .collect())
}

/// Puts back what the master change dropped: the IPv6 addresses first (their prefix
/// routes make the gateways reachable again), then the routes, in `table`. The addresses
/// skip duplicate address detection: they held the same link a moment ago.
fn put_back(nl: &mut Netlink, link: &Link, carried: &Carried, table: u32) -> Result<(), CniError> {
    let now = global_ipv6(nl, link)?;
    for address in carried.ipv6.iter().filter(|a| !now.iter().any(|n| n.address == a.address)) {
        let flags = AddressFlags::Nodad | (address.flags & AddressFlags::Noprefixroute);
        nl.add_address(link.index, address.address, flags).ignore_exists().map_err(|e| {
            CniError::internal(format!("could not restore address {} on {}: {e}", address.address, link.name))
        })?;
    }
    for route in &carried.routes {
        let mut moved = route.clone();
        moved.table = table;
        // Already there (a default route another interface of the VRF brought) is fine.
        nl.add_route(&moved).ignore_exists().map_err(|e| {
            CniError::internal(format!(
                "could not move route {} of {} to table {table}: {e}",
                route.destination, link.name
            ))
        })?;
    }
    Ok(())
}

/// Enslaves `link` to `vrf`, its routes following it from the main table into the VRF's.
pub fn enslave(nl: &mut Netlink, link: &Link, vrf: &Vrf) -> Result<(), CniError> {
    let carried = carried(nl, link, MAIN_TABLE)?;
    nl.set_link_master(link.index, vrf.link.index).map_err(|e| {
        CniError::internal(format!("could not put {} into VRF {}: {e}", link.name, vrf.link.name))
    })?;
    put_back(nl, link, &carried, vrf.table)
}

/// Releases `link` from `vrf`, its routes following it back into the main table.
pub fn release(nl: &mut Netlink, link: &Link, vrf: &Vrf) -> Result<(), CniError> {
    let carried = carried(nl, link, vrf.table)?;
    nl.set_link_nomaster(link.index).map_err(|e| {
        CniError::internal(format!("could not take {} out of VRF {}: {e}", link.name, vrf.link.name))
    })?;
    put_back(nl, link, &carried, MAIN_TABLE)
}

/// The interfaces enslaved to `vrf`.
pub fn members(nl: &mut Netlink, vrf: &Vrf) -> Result<Vec<Link>, CniError> {
    Ok(nl.links().or_cni("list links")?.into_iter().filter(|l| l.master == Some(vrf.link.index)).collect())
}
