//! `vrf`: puts the container's interface into a VRF (an L3 master device with a routing
//! table of its own), so that several attachments of one container route independently.
//!
//! A chained plugin. ADD creates the VRF `vrfname` in the container (bound to `table`, or
//! to the lowest table no VRF, rule or route of the namespace uses) or reuses it, then
//! enslaves the container interface(s) of `prevResult` (see [`container_interfaces`]);
//! their routes move into the VRF's table with them (see [`enslave`]). The result passes
//! through unchanged. DEL takes the interfaces out again (their routes back into the main
//! table) and removes the VRF once no interface is left in it. Everything ADD can refuse
//! (a VRF of that name with another table, another VRF on the requested table, a link of
//! that name that is not a VRF, an interface missing or enslaved elsewhere) is checked
//! before anything changes, and a failure halfway is undone.
//!
//! No lock is taken: the runtime never runs two operations for one container at once,
//! and the VRF lives in the container's own namespace.

mod device;
mod enslave;

use crate::common::{open_container_netns, open_container_netns_for_del, DelErrors, NetResultExt};
use cni_net::netlink::Vrf as VrfDevice;
use cni_net::{Idempotent, Link, Netlink};
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::validate::validate_interface_name_field;
use device::{Plan, RESERVED_TABLES};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(crate) struct VrfConf {
    #[serde(default)]
    vrfname: String,
    /// 0 or absent: the first free table.
    #[serde(default)]
    table: u32,
}

pub(crate) fn load(req: &Request) -> Result<VrfConf, CniError> {
    let conf: VrfConf = req.config()?;
    if conf.vrfname.is_empty() {
        return Err(CniError::invalid_config("vrfname is required: the VRF device to put the interface in"));
    }
    validate_interface_name_field("vrfname", &conf.vrfname)?;
    if let Some((_, kernel)) = RESERVED_TABLES.iter().find(|(t, _)| *t == conf.table) {
        return Err(CniError::invalid_config(format!(
            "table {} is the kernel's {kernel} table: a VRF needs a table of its own",
            conf.table
        )));
    }
    Ok(conf)
}

/// The interfaces this attachment puts into the VRF: those of the result that live in the
/// container (they have a `sandbox`), or CNI_IFNAME when the result names none.
fn container_interfaces(result: Option<&CniResult>, ifname: &str) -> Vec<String> {
    let mut names: Vec<String> = result
        .map(|r| r.interfaces.iter().filter(|i| !i.sandbox.is_empty()).map(|i| i.name.clone()).collect())
        .unwrap_or_default();
    names.dedup();
    if names.is_empty() {
        names.push(ifname.to_string());
    }
    names
}

fn container_link(nl: &mut Netlink, name: &str) -> Result<Link, CniError> {
    nl.link_by_name(name)
        .or_cni("look up the container interface")?
        .ok_or_else(|| CniError::internal(format!("vrf: interface {name} is not in the container")))
}

/// Undoes a failed ADD: releases what it enslaved and removes a VRF it created.
fn undo(nl: &mut Netlink, vrf: &VrfDevice, enslaved: &[Link], created: bool) {
    for link in enslaved.iter().rev() {
        if let Err(e) = enslave::release(nl, link, vrf) {
            eprintln!("vrf: rollback: {}", e.msg);
        }
    }
    if created {
        if let Err(e) = nl.delete_link(vrf.link.index).ignore_missing() {
            eprintln!("vrf: rollback: cannot delete VRF {}: {e}", vrf.link.name);
        }
    }
}

pub struct Vrf;

impl Plugin for Vrf {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(req)?;
        let prev = req.chained_prev_result()?;
        let names = container_interfaces(prev.as_ref(), &req.ifname);
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;

        let plan = device::plan(&mut nl, &conf.vrfname, conf.table)?;
        let existing = match &plan {
            Plan::Use(vrf) => Some(vrf.link.index),
            Plan::Create(_) => None,
        };
        let mut to_enslave = Vec::new();
        for name in &names {
            let link = container_link(&mut nl, name)?;
            match link.master {
                None => to_enslave.push(link),
                // A repeated ADD: already where it belongs.
                Some(master) if Some(master) == existing => {}
                Some(master) => {
                    let other = nl.link_by_index(master).ok().flatten().map(|l| l.name);
                    return Err(CniError::internal(format!(
                        "vrf: interface {name} already has a master ({})",
                        other.unwrap_or_else(|| format!("#{master}"))
                    )));
                }
            }
        }

        let (vrf, created) = match plan {
            Plan::Use(vrf) => (vrf, false),
            Plan::Create(table) => (device::create(&mut nl, &conf.vrfname, table)?, true),
        };
        let mut enslaved = Vec::new();
        for link in to_enslave {
            if let Err(e) = enslave::enslave(&mut nl, &link, &vrf) {
                // The failed one may be half-way: release it too (a no-op if it is not in).
                enslaved.push(link);
                undo(&mut nl, &vrf, &enslaved, created);
                return Err(e);
            }
            enslaved.push(link);
        }

        match prev {
            Some(prev) => Ok(prev),
            None => {
                let link = container_link(&mut nl, &req.ifname)?;
                crate::common::iface::result_from_link(&mut nl, &link, &req.netns)
            }
        }
    }

    /// Takes the interfaces out (those still in the VRF), then removes the VRF if that
    /// left it empty. A missing namespace, VRF or interface is nothing to do.
    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let Some(ns) = open_container_netns_for_del(req)? else { return Ok(()) };
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let Some(vrf) = device::find(&mut nl, &conf.vrfname).ok().flatten() else { return Ok(()) };
        // A damaged prevResult must not make DEL impossible: CNI_IFNAME is the attachment.
        let prev = req.prev_result().ok().flatten();
        let mut errors = DelErrors::new();
        for name in container_interfaces(prev.as_ref(), &req.ifname) {
            let link = nl.link_by_name(&name).or_cni("look up the container interface")?;
            if let Some(link) = link.filter(|l| l.master == Some(vrf.link.index)) {
                errors.record(
                    format!("{name} from VRF {}", vrf.link.name),
                    enslave::release(&mut nl, &link, &vrf),
                );
            }
        }
        if enslave::members(&mut nl, &vrf)?.is_empty() {
            let deleted = nl.delete_link(vrf.link.index).ignore_missing().map(drop);
            errors.record(format!("VRF {}", vrf.link.name), deleted.or_cni("delete the VRF"));
        }
        errors.into_result()
    }

    /// The VRF exists (with the configured table) and holds the interface(s).
    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let prev = req.require_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let vrf = device::find(&mut nl, &conf.vrfname)?.ok_or_else(|| {
            CniError::internal(format!("vrf: VRF {} is not in the container", conf.vrfname))
        })?;
        if conf.table != 0 && vrf.table != conf.table {
            return Err(CniError::internal(format!(
                "vrf: VRF {} uses table {}, the configuration says {}",
                conf.vrfname, vrf.table, conf.table
            )));
        }
        for name in container_interfaces(Some(&prev), &req.ifname) {
            let link = container_link(&mut nl, &name)?;
            if link.master != Some(vrf.link.index) {
                return Err(CniError::internal(format!(
                    "vrf: interface {name} is not enslaved to VRF {}",
                    conf.vrfname
                )));
            }
        }
        Ok(())
    }

    fn about(&self) -> String {
        "vrf: puts the container interface into a VRF with its own routing table".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::Interface;

    #[test]
    fn the_interfaces_are_those_in_the_container_or_ifname() {
        let result = CniResult {
            interfaces: vec![
                Interface { name: "cni0".into(), ..Default::default() },
                Interface { name: "eth0".into(), sandbox: "/run/netns/x".into(), ..Default::default() },
            ],
            ..Default::default()
        };
        assert_eq!(container_interfaces(Some(&result), "net1"), ["eth0"]);
        assert_eq!(container_interfaces(None, "net1"), ["net1"]);
        assert_eq!(container_interfaces(Some(&CniResult::default()), "net1"), ["net1"]);
    }
}
