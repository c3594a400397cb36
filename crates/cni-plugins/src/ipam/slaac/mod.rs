//! `slaac` IPAM: addresses from the routers on the link (RFC 4862 stateless address
//! autoconfiguration), done by the kernel and reported in the result.
//!
//! It works on the interface the interface plugin already made (like `dhcp`, it is asked
//! after the interface exists; see `cni_sdk::delegate::ipam_needs_interface`). ADD turns
//! on what autoconfiguration needs on CNI_IFNAME ([`sysctls`]), brings the link up, asks
//! the routers to advertise (a router solicitation) and waits, at most `ipam.timeout`, for
//! a global, preferred, DAD-complete address of a /64 prefix; it reports those addresses
//! with the advertising router as gateway and a default route through it. No usable
//! address in time is code 11, and what ADD changed is put back. The addresses keep the
//! kernel's lifetimes: the router renews or withdraws them, and an interface plugin that
//! "adds" a reported address finds it there already and leaves it alone.
//!
//! DEL turns autoconfiguration off on the interface and removes the addresses it made;
//! no namespace or no interface is success. CHECK: every IPv6 address of the prevResult
//! is still on the interface and usable. GC and STATUS: no state, nothing to do.

pub mod config;
pub mod kernel_state;
pub mod sysctls;
pub mod wait;

use crate::common::rollback::{Rollback, Undo};
use crate::common::{open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::netlink::{IpAddress, IpFamily};
use cni_net::{Idempotent, Link, NetNs, Netlink};
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::{IpConfig, Route};
use ipnet::IpNet;
use kernel_state::State;
use std::net::{IpAddr, Ipv6Addr};

pub struct Slaac;

/// A running ADD on one link: dropped without [`Attempt::succeeded`], it removes the
/// addresses autoconfigured since it began and takes the link down again if it was down.
/// Declared before the [`sysctls::Enabled`] guard, so it drops after it: autoconf is off
/// again before the addresses go, and no new one can follow.
struct Attempt<'a> {
    ns: &'a NetNs,
    link: Link,
    before: Vec<IpNet>,
}

impl<'a> Attempt<'a> {
    fn begin(ns: &'a NetNs, nl: &mut Netlink, link: Link) -> Result<Rollback<Attempt<'a>>, CniError> {
        let before = autoconfigured(nl, &link)?.into_iter().map(|a| a.address).collect();
        Ok(Rollback::new(Attempt { ns, link, before }))
    }

    fn take_back(&self) -> Result<(), cni_net::Error> {
        let mut nl = Netlink::in_ns(self.ns)?;
        for a in nl.addresses(Some(self.link.index), Some(IpFamily::V6))? {
            if kernel_state::is_autoconfigured(&a) && !self.before.contains(&a.address) {
                nl.delete_address(self.link.index, a.address).ignore_missing()?;
            }
        }
        if !self.link.up {
            nl.set_link_down(self.link.index)?;
        }
        Ok(())
    }
}

impl Undo for Attempt<'_> {
    fn undo(&mut self) {
        if let Err(e) = self.take_back() {
            eprintln!("slaac: rollback on {}: {e}", self.link.name);
        }
    }
}

/// The autoconfigured addresses on `link`, whatever their state.
fn autoconfigured(nl: &mut Netlink, link: &Link) -> Result<Vec<IpAddress>, CniError> {
    let all = nl.addresses(Some(link.index), Some(IpFamily::V6)).or_cni("list the container's addresses")?;
    Ok(all.into_iter().filter(kernel_state::is_autoconfigured).collect())
}

/// CNI_IFNAME in the container: made by the interface plugin before this one runs.
fn container_link(nl: &mut Netlink, req: &Request) -> Result<Link, CniError> {
    nl.link_by_name(&req.ifname).or_cni("look up the container interface")?.ok_or_else(|| {
        CniError::internal(format!(
            "slaac: interface {} is not in the container (an interface plugin must make it first)",
            req.ifname
        ))
    })
}

fn result(addresses: Vec<IpNet>, router: Option<Ipv6Addr>) -> CniResult {
    let gateway = router.map(IpAddr::V6);
    CniResult {
        ips: addresses.into_iter().map(|address| IpConfig { interface: None, address, gateway }).collect(),
        routes: gateway.map(|gw| Route::new(IpNet::V6(Default::default()), Some(gw))).into_iter().collect(),
        ..Default::default()
    }
}

impl Plugin for Slaac {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let settings = config::load(req)?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let link = container_link(&mut nl, req)?;
        let mac = link.mac.ok_or_else(|| {
            CniError::invalid_config(format!(
                "slaac: {} has no Ethernet address, which autoconfiguration derives the address from",
                req.ifname
            ))
        })?;
        let attempt = Attempt::begin(&ns, &mut nl, link.clone())?;
        let enabled = sysctls::enable(&ns, &req.ifname)?;
        if !link.up {
            nl.set_link_up(link.index).or_cni(&format!("set {} up", link.name))?;
        }
        let found = wait::for_address(&ns, &mut nl, &link, mac, settings.timeout)?;
        enabled.keep();
        attempt.keep();
        Ok(result(found.addresses, found.router))
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let Some(ns) = open_container_netns_for_del(req)? else { return Ok(()) };
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let Some(link) = nl.link_by_name(&req.ifname).or_cni("look up the container interface")? else {
            return Ok(());
        };
        sysctls::disable_autoconf(&ns, &req.ifname)?;
        for a in autoconfigured(&mut nl, &link)? {
            nl.delete_address(link.index, a.address)
                .ignore_missing()
                .or_cni(&format!("remove {} from {}", a.address, link.name))?;
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        config::load(req)?;
        let prev = req.require_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let link = container_link(&mut nl, req)?;
        let present = autoconfigured(&mut nl, &link)?;
        let expected: Vec<IpNet> =
            prev.ips.iter().map(|ip| ip.address).filter(|a| matches!(a, IpNet::V6(_))).collect();
        if expected.is_empty() {
            return Err(CniError::internal("slaac: prevResult has no IPv6 address to check"));
        }
        for address in expected {
            match present.iter().find(|a| a.address == address).map(kernel_state::state) {
                Some(State::Usable) => {}
                Some(state) => {
                    return Err(CniError::internal(format!(
                        "slaac: address {address} on {} is no longer usable ({state:?})",
                        link.name
                    )))
                }
                None => {
                    return Err(CniError::internal(format!(
                        "slaac: address {address} is no longer on {} (did the router withdraw its prefix?)",
                        link.name
                    )))
                }
            }
        }
        Ok(())
    }

    fn about(&self) -> String {
        "slaac: reports the addresses the kernel autoconfigures from router advertisements".into()
    }
}
