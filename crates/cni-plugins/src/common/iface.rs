//! Putting an IPAM result on an interface, and checking later that it is still there.

use super::NetResultExt;
use cni_net::netlink::{AddressFlags, IpFamily, Route as KernelRoute, RouteScope};
use cni_net::Idempotent;
use cni_net::{Link, Netlink};
use cni_sdk::{CniError, CniResult, Request};
use cni_types::Route;
use std::net::IpAddr;

/// The gateway of the first address of each family on interface `iface`: the default next
/// hop for routes that name none.
fn gateways(result: &CniResult, iface: usize) -> (Option<IpAddr>, Option<IpAddr>) {
    let first =
        |v4: bool| result.ips_of(Some(iface)).filter(|ip| ip.is_ipv4() == v4).find_map(|ip| ip.gateway);
    (first(true), first(false))
}

fn kernel_route(route: &Route, oif: u32, gateway: Option<IpAddr>) -> KernelRoute {
    let mut kr = KernelRoute::new(route.dst).oif(oif);
    if let Some(gw) = gateway {
        kr = kr.gateway(gw);
    }
    if let Some(p) = route.priority {
        kr = kr.priority(p);
    }
    if let Some(t) = route.table {
        kr = kr.table(t);
    }
    if let Some(s) = route.scope {
        kr = kr.scope(RouteScope::from(s));
    }
    kr.mtu = route.mtu;
    kr.advmss = route.advmss;
    kr
}

/// Brings `link` up and gives it the addresses of result interface `iface` and the result's
/// routes. IPv6 addresses skip duplicate address detection unless `enable_dad`: the
/// container's address is unique by allocation, and waiting for DAD costs 1–2 s per ADD.
/// A route that already exists is skipped (another network may have installed the default
/// route first; the first one wins).
///
/// An address the kernel already holds is left as it is, lifetimes included: the `slaac`
/// IPAM plugin reports addresses the kernel autoconfigured, and replacing one would make
/// it permanent, so the container would keep a prefix its router renumbered away or
/// withdrew. Its default route, learnt from the same advertisement, is kept the same way.
pub fn configure(
    nl: &mut Netlink,
    link: &Link,
    result: &CniResult,
    iface: usize,
    enable_dad: bool,
) -> Result<(), CniError> {
    nl.set_link_up(link.index).or_cni(&format!("set {} up", link.name))?;
    for ip in result.ips_of(Some(iface)) {
        let flags = if ip.is_ipv4() || enable_dad { AddressFlags::empty() } else { AddressFlags::Nodad };
        nl.add_address(link.index, ip.address, flags).ignore_exists().map_err(|e| {
            CniError::internal(format!("failed to add IP addr {} to {}: {e}", ip.address, link.name))
        })?;
    }
    let (gw4, gw6) = gateways(result, iface);
    for route in &result.routes {
        let gateway = route.gw.or(if route.dst.addr().is_ipv4() { gw4 } else { gw6 });
        nl.add_route(&kernel_route(route, link.index, gateway)).ignore_exists().map_err(|e| {
            CniError::internal(format!("failed to add route {} on {}: {e}", route.dst, link.name))
        })?;
    }
    Ok(())
}

/// CHECK: the index of the prevResult's interface for this request (CNI_IFNAME in
/// CNI_NETNS); its absence means the prevResult belongs to another attachment.
pub fn prev_interface(prev: &CniResult, req: &Request) -> Result<usize, CniError> {
    prev.interfaces.iter().position(|i| i.name == req.ifname && i.sandbox == req.netns).ok_or_else(|| {
        CniError::internal(format!(
            "Sandbox in prevResult doesn't match configured netns: {} (interface {})",
            req.netns, req.ifname
        ))
    })
}

/// CHECK: `link` still has the addresses and routes of result interface `iface`.
pub fn check_addressing(
    nl: &mut Netlink,
    link: &Link,
    result: &CniResult,
    iface: usize,
) -> Result<(), CniError> {
    check_addresses(nl, link, result, iface)?;
    check_routes(nl, link, result, iface)
}

/// CHECK: every address of result interface `iface` is on `link`.
pub fn check_addresses(
    nl: &mut Netlink,
    link: &Link,
    result: &CniResult,
    iface: usize,
) -> Result<(), CniError> {
    let present = nl.addresses(Some(link.index), None).or_cni("list addresses")?;
    for ip in result.ips_of(Some(iface)) {
        if !present.iter().any(|a| a.address == ip.address) {
            return Err(CniError::internal(format!("address {} is missing from {}", ip.address, link.name)));
        }
    }
    Ok(())
}

/// CHECK: every route of the result exists on `link` with the expected next hop.
pub fn check_routes(nl: &mut Netlink, link: &Link, result: &CniResult, iface: usize) -> Result<(), CniError> {
    let (gw4, gw6) = gateways(result, iface);
    for route in &result.routes {
        let family = if route.dst.addr().is_ipv4() { IpFamily::V4 } else { IpFamily::V6 };
        let gateway = route.gw.or(if family == IpFamily::V4 { gw4 } else { gw6 });
        let present = nl.routes(family, route.table).or_cni("list routes")?;
        let found = present.iter().any(|r| {
            r.destination == route.dst.trunc()
                && r.oif == Some(link.index)
                && (gateway.is_none() || r.gateway == gateway)
        });
        if !found {
            let via = gateway.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(CniError::internal(format!(
                "route to {}{via} is missing on {}",
                route.dst, link.name
            )));
        }
    }
    Ok(())
}

/// CHECK: the interface named in the result for the container exists, with its MAC.
pub fn check_link(nl: &mut Netlink, result: &CniResult, iface: usize) -> Result<Link, CniError> {
    let Some(expected) = result.interfaces.get(iface) else {
        return Err(CniError::internal(format!("prevResult has no interface #{iface}")));
    };
    let link = nl.link_by_name(&expected.name).or_cni("look up container interface")?.ok_or_else(|| {
        CniError::internal(format!("interface {} is missing from the container", expected.name))
    })?;
    if !expected.mac.is_empty() {
        let actual = link.mac.map(|m| m.to_string()).unwrap_or_default();
        if !actual.eq_ignore_ascii_case(&expected.mac) {
            return Err(CniError::internal(format!(
                "interface {} has MAC {actual}, expected {}",
                expected.name, expected.mac
            )));
        }
    }
    Ok(link)
}

/// A result describing `link` as it is (for chained plugins called before 0.3.0, which get
/// no prevResult to pass on): the interface and its global addresses.
pub fn result_from_link(nl: &mut Netlink, link: &Link, sandbox: &str) -> Result<CniResult, CniError> {
    let ips = nl
        .addresses(Some(link.index), None)
        .or_cni("list the container interface's addresses")?
        .into_iter()
        .filter(|a| a.scope == 0)
        .map(|a| cni_types::IpConfig { interface: Some(0), address: a.address, gateway: None })
        .collect();
    Ok(CniResult {
        interfaces: vec![super::veth::result_interface(link, sandbox)],
        ips,
        ..Default::default()
    })
}

/// The reference's plugins#160: a container interface whose addresses come from CNI (an
/// IPAM plugin's, a chain's prevResult) must not also take addresses from router
/// advertisements, which no result names (a second source address nobody allocated). So
/// `autoconf` goes off on `ifname` in `ns`, before the link comes up, unless the IPAM
/// plugin is `slaac`, whose addresses those are. Route learning (`accept_ra`) stays as
/// it is: the default router an advertisement gives is how an IPv6 segment routes, and
/// DHCPv6 hosts depend on it. An interface CNI gives no address (layer 2 only) keeps the
/// kernel's default: autoconfiguration is then the only IPv6 it can get. A namespace
/// without IPv6 has no such setting, and nothing to turn off.
pub fn refuse_router_addresses(
    ns: &cni_net::NetNs,
    req: &Request,
    ifname: &str,
    addressed_by_cni: bool,
) -> Result<(), CniError> {
    prepare_container_interface(ns, req, ifname, addressed_by_cni, Announce::No)
}

/// Whether the container interface announces its addresses when it comes up again or
/// changes MAC (`arp_notify=1`), as the reference's bridge and tap set it: neighbours that
/// cached a reused address with an earlier container's MAC then learn the new one. Best
/// effort, as in the reference: without it they still learn it once their entry is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    Yes,
    No,
}

/// [`refuse_router_addresses`] and, with [`Announce::Yes`], `arp_notify=1` on `ifname`,
/// in one visit of `ns` (each visit moves the calling thread in and back out: two
/// `setns` calls on every ADD).
pub fn prepare_container_interface(
    ns: &cni_net::NetNs,
    req: &Request,
    ifname: &str,
    addressed_by_cni: bool,
    announce: Announce,
) -> Result<(), CniError> {
    let refuse = addressed_by_cni && !cni_sdk::delegate::ipam_autoconfigures(req);
    if !refuse && announce == Announce::No {
        return Ok(());
    }
    let set = || -> Result<(), CniError> {
        if refuse {
            let key = format!("net/ipv6/conf/{ifname}/autoconf");
            cni_net::sysctl::write(&key, "0").ignore_missing().map(drop).or_cni(&format!("set {key}=0"))?;
        }
        if announce == Announce::Yes {
            let key = format!("net.ipv4.conf.{ifname}.arp_notify");
            if let Err(e) = cni_net::sysctl::write(&key, "1") {
                eprintln!("cannot set {key}: {e}");
            }
        }
        Ok(())
    };
    ns.run(set).or_cni("enter the container's network namespace")?
}

/// Makes a host-side link CNI created or uses (a bridge, a veth's host end, a VLAN
/// gateway) ignore IPv6 router advertisements (`accept_ra=0`), in the calling thread's
/// namespace, before it is up.
///
/// Why: those links face containers, and any container can send an advertisement. With
/// the kernel's default (`accept_ra=1`, on a host not forwarding IPv6) the host would take
/// a default route and a SLAAC address from it: a container on an IPv4-only network could
/// redirect the host's IPv6 traffic (CVE-2020-10749; the reference sets the same). The
/// routes of these links are ours to make. A host without IPv6 has no such setting.
pub fn refuse_router_advertisements(link: &str) -> Result<(), CniError> {
    let key = format!("net/ipv6/conf/{link}/accept_ra");
    cni_net::sysctl::write(&key, "0").ignore_missing().map(drop).or_cni(&format!("set {key}=0"))
}

/// Turns off IPv6 duplicate address detection on a link this plugin created on the host
/// (a bridge, ptp's host end), before it is up.
///
/// Why: the kernel solicits neighbours for forwarded IPv6 packets from the outgoing
/// link's link-local address, and that address goes through DAD whenever the link gains
/// carrier: for 1-2 s no solicitation is sent, so the first IPv6 connections forwarded to
/// a new container failed with EHOSTUNREACH. The link is ours and its link-local address
/// derived from its own MAC; the gateway addresses on it skip DAD already.
pub fn skip_link_local_dad(link: &str) -> Result<(), CniError> {
    cni_net::sysctl::disable_ipv6_dad_here(link).or_cni(&format!("disable IPv6 DAD on {link}"))
}
