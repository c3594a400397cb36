//! `loopback`: brings `lo` up in the container (and down again on DEL).

use crate::common::{open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::Netlink;
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::{Interface, IpConfig};

pub struct Loopback;

impl Plugin for Loopback {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let lo = nl.require_link("lo").or_cni("find lo")?;
        nl.set_link_up(lo.index).or_cni("set lo up")?;
        // The kernel gives lo its addresses once it is up; report what is there.
        let ips = nl
            .addresses(Some(lo.index), None)
            .or_cni("list lo addresses")?
            .into_iter()
            .map(|a| IpConfig { interface: Some(0), address: a.address, gateway: None })
            .collect();
        Ok(CniResult {
            interfaces: vec![Interface {
                name: "lo".into(),
                mac: "00:00:00:00:00:00".into(),
                sandbox: req.netns.clone(),
                ..Default::default()
            }],
            ips,
            ..Default::default()
        })
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let Some(ns) = open_container_netns_for_del(req)? else { return Ok(()) };
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        if let Some(lo) = nl.link_by_name("lo").or_cni("find lo")? {
            nl.set_link_down(lo.index).or_cni("set lo down")?;
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let lo = nl.require_link("lo").or_cni("find lo")?;
        if !lo.up {
            return Err(CniError::internal("lo is down in the container"));
        }
        Ok(())
    }

    fn about(&self) -> String {
        "loopback: brings lo up in the container".into()
    }
}
