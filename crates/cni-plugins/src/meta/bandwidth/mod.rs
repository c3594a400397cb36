//! `bandwidth`: limits the rate of traffic to and from a container with token bucket
//! filters on the host (see [`shaping`] for what goes where and how it coexists with other
//! tc users).
//!
//! A chained plugin: it needs the container's veth (made by `bridge` or `ptp`) and passes
//! `prevResult` on, with the IFB device it made for egress shaping appended. The IFB is
//! named like the reference's (`bwp` + hash of network and container ID) and carries the
//! attachment in its alias, so GC finds the ones of containers that are gone. The kernel
//! takes no alias when it creates a link, so a plugin killed between the two steps would
//! leave an IFB GC cannot attribute: the IFB is therefore created in
//! [`UNLABELLED_IFB_GROUP`] and leaves it in the same change that sets its alias, and GC
//! deletes an IFB still in that group without an alias. DEL deletes
//! the IFB; the veth's qdiscs go with the veth (and are removed if the veth is still there).

pub mod config;
pub mod shaping;

use crate::common::rollback::Rollback;
use crate::common::{open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::netlink::{LinkKind, LinkSpec};
use cni_net::Idempotent;
use cni_net::{Link, Netlink};
use cni_sdk::{CniError, CniResult, GcErrors, Plugin, Request, Version};
use cni_types::Interface;
use config::BandwidthConf;
use sha2::{Digest, Sha512};
use shaping::Shaping;

/// The prefix of IFB device names, as the reference.
pub const IFB_PREFIX: &str = "bwp";
/// The prefix of the alias of our IFB devices: `cni-bandwidth:<network>:<containerID>:<ifname>`
/// (none of the three may contain a colon).
pub const ALIAS_PREFIX: &str = "cni-bandwidth";
/// The link group an IFB is created in until its alias is set (the group, unlike the
/// alias, is taken at creation): one found there without an alias was made by a bandwidth
/// ADD killed in between. Any IFB outside it without our alias (the reference's, an
/// operator's) is never touched by GC.
pub const UNLABELLED_IFB_GROUP: u32 = 0x6277_6966; // "bwif"
/// Longest alias the kernel stores.
const MAX_ALIAS: usize = 255;

/// The IFB name for an attachment: `bwp` + the first 12 hex digits of
/// sha512(network name + container ID), the reference's name, so DEL of our plugin removes
/// devices the reference made and vice versa.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{IFB_PREFIX}{}", &hex[..15 - IFB_PREFIX.len()])
}

fn ifb_alias(req: &Request) -> String {
    format!("{ALIAS_PREFIX}:{}:{}:{}", req.conf.name, req.container_id, req.ifname)
}

/// The attachment named by an IFB alias: (network, container ID, ifname).
fn parse_alias(alias: &str) -> Option<(&str, &str, &str)> {
    let mut parts = alias.splitn(4, ':');
    if parts.next()? != ALIAS_PREFIX {
        return None;
    }
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// An IFB a bandwidth ADD created and did not live to label (see [`UNLABELLED_IFB_GROUP`]).
fn is_unlabelled(link: &Link) -> bool {
    shaping::is_ifb(link)
        && link.group == UNLABELLED_IFB_GROUP
        && link.alias.is_none()
        && link.name.starts_with(IFB_PREFIX)
}

/// The host end of the container's veth: the container interface's peer, cross-checked
/// from both sides (an index alone could name an unrelated device in another namespace).
fn host_veth(host: &mut Netlink, container: &mut Netlink, ifname: &str) -> Result<Link, CniError> {
    let inside = container
        .link_by_name(ifname)
        .or_cni("look up the container interface")?
        .ok_or_else(|| CniError::internal(format!("bandwidth: container interface {ifname} not found")))?;
    let not_a_pair = || {
        CniError::internal(format!(
            "bandwidth: container interface {ifname} has no veth peer in the host namespace"
        ))
    };
    if inside.kind != LinkKind::Veth {
        return Err(not_a_pair());
    }
    let peer = inside.link.ok_or_else(not_a_pair)?;
    host.link_by_index(peer)
        .or_cni("look up the host veth")?
        .filter(|link| link.kind == LinkKind::Veth && link.link == Some(inside.index))
        .ok_or_else(not_a_pair)
}

/// The reference insists that the host veth is an interface of the previous result.
fn require_in_result(result: &CniResult, veth: &Link) -> Result<(), CniError> {
    if result.interfaces.iter().any(|i| i.sandbox.is_empty() && i.name == veth.name) {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "bandwidth: the container's host veth {} is not in prevResult",
            veth.name
        )))
    }
}

/// Before 0.3.0 there is no prevResult to pass on: the result describes the container
/// interface as it is.
fn result_from_container(req: &Request, nl: &mut Netlink) -> Result<CniResult, CniError> {
    let link = nl.require_link(&req.ifname).or_cni("look up the container interface")?;
    crate::common::iface::result_from_link(nl, &link, &req.netns)
}

pub struct Bandwidth;

impl Bandwidth {
    fn shape(
        req: &Request,
        conf: &BandwidthConf,
        host: &mut Netlink,
        veth: &Link,
    ) -> Result<Option<Link>, CniError> {
        let ingress = conf.ingress.as_ref().map(shaping::tbf_params).transpose()?;
        let egress = conf.egress.as_ref().map(shaping::tbf_params).transpose()?;
        for (direction, limit) in [("ingress", &conf.ingress), ("egress", &conf.egress)] {
            // tbf drops a packet bigger than its bucket unless it can segment it (GSO).
            if let Some(limit) = limit.filter(|l| l.burst_bits / 8 < u64::from(veth.mtu)) {
                eprintln!(
                    "bandwidth: {direction}Burst {} bits is less than one {}-byte packet of {}; full-size \
                     packets may be dropped",
                    limit.burst_bits, veth.mtu, veth.name
                );
            }
        }
        let mut rollback = Rollback::new(Shaping::default());
        if let Some(params) = ingress {
            shaping::install_root_tbf(host, veth, params, &mut rollback)?;
        }
        let mut ifb = None;
        if let Some(params) = egress {
            let name = ifb_name(&req.conf.name, &req.container_id);
            let mut spec = LinkSpec::new(name.clone()).mtu(veth.mtu).group(UNLABELLED_IFB_GROUP);
            if let Some(txqlen) = veth.txqlen.filter(|len| *len > 0) {
                spec = spec.txqlen(txqlen);
            }
            let link = match host.add_ifb(&spec) {
                Ok(Some(link)) => link,
                Ok(None) => return Err(CniError::internal("bandwidth: the IFB was not created on the host")),
                Err(e) if e.is_already_exists() => {
                    return Err(CniError::internal(format!(
                        "bandwidth: IFB device {name} already exists (is the attachment already set up?)"
                    )))
                }
                Err(e) => return Err(CniError::internal(format!("bandwidth: create IFB {name}: {e}"))),
            };
            shaping::created_link(&mut rollback, &link);
            let alias = ifb_alias(req);
            if alias.len() <= MAX_ALIAS {
                host.set_link_alias_and_group(link.index, &alias, 0)
                    .or_cni(&format!("set the alias of {name}"))?;
            } else {
                eprintln!("bandwidth: alias {alias:?} is too long; GC will not find {name}");
                host.set_link_group(link.index, 0).or_cni(&format!("set the group of {name}"))?;
            }
            // Shape first, then redirect: nothing reaches the IFB unshaped.
            shaping::install_root_tbf(host, &link, params, &mut rollback)?;
            shaping::install_redirect(host, veth, &link, &mut rollback)?;
            ifb = Some(link);
        }
        rollback.keep();
        Ok(ifb)
    }
}

impl Plugin for Bandwidth {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = config::load(req)?;
        let prev = req.chained_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut container = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let mut result = match prev {
            Some(prev) => prev,
            None => result_from_container(req, &mut container)?,
        };
        if conf.is_unlimited() {
            return Ok(result);
        }
        let mut host = Netlink::new().or_cni("open netlink on the host")?;
        let veth = host_veth(&mut host, &mut container, &req.ifname)?;
        if req.version >= Version::V0_3_0 {
            require_in_result(&result, &veth)?;
        }
        if let Some(ifb) = Self::shape(req, &conf, &mut host, &veth)? {
            result.interfaces.push(Interface {
                name: ifb.name.clone(),
                mac: ifb.mac.map(|m| m.to_string()).unwrap_or_default(),
                ..Default::default()
            });
        }
        Ok(result)
    }

    /// Deletes the IFB; when the container's veth is still there, also takes our qdiscs and
    /// filter off it. Nothing there, no namespace: success.
    fn del(&self, req: &Request) -> Result<(), CniError> {
        config::load(req)?;
        let mut host = Netlink::new().or_cni("open netlink on the host")?;
        let name = ifb_name(&req.conf.name, &req.container_id);
        let ifb = host.link_by_name(&name).or_cni("look up the IFB")?.filter(shaping::is_ifb);
        if let Some(ns) = open_container_netns_for_del(req)? {
            let mut container = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
            if let Ok(veth) = host_veth(&mut host, &mut container, &req.ifname) {
                shaping::remove_from_veth(&mut host, &veth, ifb.as_ref().map(|l| l.index))?;
            }
        }
        if let Some(ifb) = ifb {
            host.delete_link(ifb.index)
                .ignore_missing()
                .map_err(|e| CniError::internal(format!("bandwidth: delete IFB {name}: {e}")))?;
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let prev = req.require_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut container = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let mut host = Netlink::new().or_cni("open netlink on the host")?;
        let veth = host_veth(&mut host, &mut container, &req.ifname)?;
        require_in_result(&prev, &veth)?;
        if let Some(limit) = &conf.ingress {
            shaping::check_root_tbf(&mut host, &veth, shaping::tbf_params(limit)?)?;
        }
        if let Some(limit) = &conf.egress {
            let name = ifb_name(&req.conf.name, &req.container_id);
            let ifb = host
                .link_by_name(&name)
                .or_cni("look up the IFB")?
                .filter(shaping::is_ifb)
                .ok_or_else(|| CniError::internal(format!("bandwidth: IFB device {name} is missing")))?;
            shaping::check_root_tbf(&mut host, &ifb, shaping::tbf_params(limit)?)?;
            shaping::check_redirect(&mut host, &veth, &ifb)?;
        }
        Ok(())
    }

    /// Deletes this network's IFB devices whose attachment the runtime no longer has.
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req.valid_attachments()?;
        let mut host = Netlink::new().or_cni("open netlink on the host")?;
        let mut errors = GcErrors::new();
        for link in host.links().or_cni("list links")? {
            if is_unlabelled(&link) {
                // A bandwidth ADD was killed between creating it and labelling it (of this
                // network or another: nothing says which, and no attachment owns it).
                if let Err(e) = host.delete_link(link.index).ignore_missing() {
                    errors.push(format!("IFB {}", link.name), CniError::internal(format!("delete: {e}")));
                }
                continue;
            }
            let Some((network, container_id, ifname)) =
                link.alias.as_deref().filter(|_| shaping::is_ifb(&link)).and_then(parse_alias)
            else {
                continue;
            };
            let in_use = valid.iter().any(|a| a.container_id == container_id && a.ifname == ifname);
            if network != req.conf.name || in_use {
                continue;
            }
            if let Err(e) = host.delete_link(link.index).ignore_missing() {
                errors.push(format!("IFB {}", link.name), CniError::internal(format!("delete: {e}")));
            }
        }
        Ok(errors.into_result()?)
    }

    /// Ready: it needs nothing but the kernel, and validates its configuration.
    fn status(&self, req: &Request) -> Result<(), CniError> {
        config::load(req).map(drop)
    }

    fn about(&self) -> String {
        "bandwidth: shapes container traffic with tbf on the host veth and an IFB".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifb_name_matches_the_reference_scheme() {
        let name = ifb_name("mynet", "container1");
        assert_eq!(name.len(), 15);
        assert!(name.starts_with("bwp"));
        let digest = Sha512::digest(b"mynetcontainer1");
        assert_eq!(&name[3..5], &format!("{:02x}", digest[0]));
        assert_ne!(ifb_name("mynet", "container2"), name);
    }

    #[test]
    fn alias_round_trips() {
        assert_eq!(parse_alias("cni-bandwidth:net:abc:eth0"), Some(("net", "abc", "eth0")));
        assert_eq!(parse_alias("something-else:net:abc:eth0"), None);
        assert_eq!(parse_alias("cni-bandwidth:net"), None);
    }
}
