//! `sbr`: source-based routing for the container interface.
//!
//! For each address of the interface in `prevResult`, ADD makes a policy routing table
//! (the first id from 100 up that no rule or route uses), puts in it a default route via
//! the address's gateway and the interface's routes from the main table (which it then
//! removes from the main table), and adds `ip rule from <address> lookup <table>`. With
//! `table` set, it only adds the rules, pointing at that table, and leaves routes alone.
//!
//! DEL finds its rules by the container's addresses (from `prevResult`, else from the
//! interface) in one rules dump, deletes them and empties the tables they pointed at.
//! Work on one namespace is serialised with a lock on the namespace file, as the reference
//! does, so two attachments of one container never pick the same table.

mod lock;
mod tables;

use crate::common::{open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::Netlink;
use cni_sdk::{CniError, CniResult, Plugin, Request};
use ipnet::IpNet;
use serde::Deserialize;
use std::net::IpAddr;

/// The first table id ADD considers.
pub const FIRST_TABLE: u32 = 100;

#[derive(Debug, Deserialize)]
pub(crate) struct SbrConf {
    /// Use this table for the rules instead of making tables (routes are left as they are).
    #[serde(default)]
    table: Option<u32>,
}

pub(crate) fn load(req: &Request) -> Result<SbrConf, CniError> {
    let conf: SbrConf = req.config()?;
    if conf.table == Some(0) {
        return Err(CniError::invalid_config("sbr: table: 0 is not a routing table id"));
    }
    Ok(conf)
}

/// One address of the container interface, with its gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceAddress {
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

impl SourceAddress {
    /// The single-address prefix rules match on (`/32` or `/128`).
    pub fn host(&self) -> IpNet {
        IpNet::new(self.address.addr(), if self.address.addr().is_ipv4() { 32 } else { 128 })
            .expect("a full-length prefix is valid")
    }
}

/// The result's addresses that belong to interface `ifname`: those naming it, and those
/// naming no interface (as the reference assumes).
fn addresses_of(result: &CniResult, ifname: &str) -> Vec<SourceAddress> {
    result
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => result.interfaces.get(i).is_none_or(|iface| iface.name == ifname),
        })
        .map(|ip| SourceAddress { address: ip.address, gateway: ip.gateway })
        .collect()
}

pub struct Sbr;

impl Plugin for Sbr {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(req)?;
        let prev = req.require_prev_result()?;
        if prev.ips.is_empty() {
            return Err(CniError::invalid_config(format!(
                "sbr: prevResult has no IP addresses for {}",
                req.ifname
            )));
        }
        let addresses = addresses_of(&prev, &req.ifname);
        let ns = open_container_netns(req)?;
        let _lock = lock::NamespaceLock::acquire(&req.netns)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        match conf.table {
            Some(table) => tables::add_rules_to_table(&ns, &mut nl, &addresses, table)?,
            None => tables::route_by_source(&ns, &mut nl, &req.ifname, &addresses)?,
        }
        Ok(prev)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let Some(ns) = open_container_netns_for_del(req)? else { return Ok(()) };
        let _lock = lock::NamespaceLock::acquire(&req.netns)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let addresses = match req.prev_result()? {
            Some(prev) => addresses_of(&prev, &req.ifname),
            None => tables::addresses_on_link(&mut nl, &req.ifname)?,
        };
        let removed = tables::remove(&mut nl, &addresses, conf.table);
        // Tables sbr chose itself whose rule is already gone go too; both steps run.
        let orphans = match conf.table {
            None => tables::remove_orphaned_tables(&mut nl, &req.ifname, &addresses),
            Some(_) => Ok(()),
        };
        removed.and(orphans)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let prev = req.require_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        tables::check(&mut nl, &addresses_of(&prev, &req.ifname), conf.table)
    }

    fn about(&self) -> String {
        "sbr: source-based routing tables and rules for the container interface".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{Interface, IpConfig};

    #[test]
    fn addresses_are_those_of_the_interface_or_of_none() {
        let result = CniResult {
            interfaces: vec![
                Interface { name: "veth0".into(), ..Default::default() },
                Interface { name: "net1".into(), ..Default::default() },
            ],
            ips: vec![
                IpConfig { interface: Some(0), address: "10.0.0.2/24".parse().unwrap(), gateway: None },
                IpConfig { interface: Some(1), address: "10.1.0.2/24".parse().unwrap(), gateway: None },
                IpConfig { interface: None, address: "fd00::2/64".parse().unwrap(), gateway: None },
            ],
            ..Default::default()
        };
        let got: Vec<String> = addresses_of(&result, "net1").iter().map(|a| a.host().to_string()).collect();
        assert_eq!(got, ["10.1.0.2/32", "fd00::2/128"]);
    }
}
