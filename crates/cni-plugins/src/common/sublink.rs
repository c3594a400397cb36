//! What vlan and ipvlan share: a link stacked on a `master` device (on the host, or in the
//! container with `linkInContainer`), made directly in the container's namespace under
//! CNI_IFNAME, then given the IPAM addresses. Only the kernel request differs.

use super::addresses::{Addresses, CONTAINER_IFACE};
use super::container_link::{self, ContainerLink};
use super::iface;
use super::veth::result_interface;
use super::NetResultExt;
use cni_net::netlink::{IpFamily, LinkSpec, MAIN_TABLE};
use cni_net::{Link, NetNs, Netlink};
use cni_sdk::{CniError, CniResult, Request};
use cni_types::Dns;

/// Where the master lives, and a socket there.
pub struct Master {
    pub link: Link,
    pub netlink: Netlink,
    pub in_container: bool,
}

/// Finds `name` on the host, or in the container when `in_container`.
pub fn master(name: &str, in_container: bool, ns: &NetNs) -> Result<Master, CniError> {
    let mut netlink = if in_container {
        Netlink::in_ns(ns).or_cni("open netlink in the container")?
    } else {
        Netlink::new().or_cni("open netlink")?
    };
    let where_ = if in_container { "in the container" } else { "on the host" };
    let link = container_link::find_master(&mut netlink, name, where_)?;
    Ok(Master { link, netlink, in_container })
}

/// The interface of the host's IPv4 default route: the reference's master when none is
/// configured.
pub fn default_route_interface() -> Result<String, CniError> {
    let mut nl = Netlink::new().or_cni("open netlink")?;
    let routes = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).or_cni("list routes")?;
    let index = routes
        .iter()
        .find(|r| r.destination.prefix_len() == 0 && r.oif.is_some())
        .and_then(|r| r.oif)
        .ok_or_else(|| CniError::invalid_config("master is not set and the host has no default route"))?;
    let link = nl.link_by_index(index).or_cni("look up the default route's interface")?;
    link.map(|l| l.name).ok_or_else(|| CniError::internal("the default route's interface vanished"))
}

/// The `mtu` key against the master's: a stacked link cannot exceed its parent.
pub fn validate_mtu(mtu: u32, master: &Link) -> Result<(), CniError> {
    container_link::validate_mtu(mtu)?;
    if mtu > master.mtu {
        return Err(CniError::invalid_config(format!(
            "invalid mtu {mtu}: must not exceed the MTU of master {} ({})",
            master.name, master.mtu
        )));
    }
    Ok(())
}

/// Where the addresses come from: the IPAM plugin, a chain's prevResult, or nowhere.
pub enum Addressing<'a> {
    Ipam,
    PrevResult(&'a CniResult),
    None,
}

/// Creates the link with `create(master socket, spec, master index)`, guarded, then puts
/// the addresses on it; returns the result with the container interface as #0.
pub fn attach(
    req: &Request,
    ns: &NetNs,
    master: &mut Master,
    mtu: u32,
    addressing: Addressing<'_>,
    dns: Option<&Dns>,
    create: impl FnOnce(&mut Netlink, &LinkSpec<'_>, u32) -> cni_net::Result<Option<Link>>,
) -> Result<CniResult, CniError> {
    // IPAM first: a request it refuses is refused before any link exists (dropped, the
    // allocation is released; the link guard below goes first on a later failure).
    let addresses = match addressing {
        Addressing::Ipam => Addresses::from_ipam(req)?,
        Addressing::PrevResult(prev) => Addresses::from_prev_result(prev),
        Addressing::None => Addresses::none(),
    };
    let mut spec = LinkSpec::new(req.ifname.as_str());
    if mtu != 0 {
        spec = spec.mtu(mtu);
    }
    if !master.in_container {
        spec = spec.netns(ns);
    }
    match create(&mut master.netlink, &spec, master.link.index) {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {
            return Err(CniError::internal(format!(
                "interface {} already exists in the container",
                req.ifname
            )))
        }
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to create {} on {}: {e}",
                req.ifname, master.link.name
            )))
        }
    }
    let mut nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
    let link = nl.require_link(&req.ifname).or_cni("look up the new interface")?;
    let link = ContainerLink::guard(ns, link);
    iface::refuse_router_addresses(ns, req, &link.link.name, !addresses.is_empty())?;
    iface::configure(&mut nl, &link.link, &addresses.result, CONTAINER_IFACE, false)?;
    let now = nl.link_by_index(link.link.index).or_cni("look up the new interface")?;
    let interface = result_interface(now.as_ref().unwrap_or(&link.link), &req.netns);
    link.keep();
    Ok(addresses.complete(interface, dns))
}

/// CHECK: the interface of the prevResult is there, of `kind`, with its addresses.
pub fn check(req: &Request, prev: &CniResult, kind: cni_net::netlink::LinkKind) -> Result<(), CniError> {
    let ns = super::open_container_netns(req)?;
    let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
    let link = iface::check_link(&mut nl, prev, CONTAINER_IFACE)?;
    if link.kind != kind {
        return Err(CniError::internal(format!("{} is a {:?} link, not {kind:?}", link.name, link.kind)));
    }
    iface::check_addressing(&mut nl, &link, prev, CONTAINER_IFACE)
}
