//! The VRF device itself: finding it, deciding whether ADD may use or create it (and with
//! which table), creating it.

use crate::common::NetResultExt;
use cni_net::netlink::{IpFamily, LinkKind, LinkSpec, Vrf};
use cni_net::Netlink;
use cni_sdk::CniError;
use std::collections::BTreeSet;

/// Tables the kernel keeps for itself: a VRF given one of them would mix its interfaces'
/// routes with the namespace's own.
pub const RESERVED_TABLES: [(u32, &str); 3] = [(253, "default"), (254, "main"), (255, "local")];

/// The VRF named `name`; `None` when no link has that name. A link of another kind with
/// that name is a configuration error: it cannot be made a VRF, nor be removed as one.
pub fn find(nl: &mut Netlink, name: &str) -> Result<Option<Vrf>, CniError> {
    let Some(link) = nl.link_by_name(name).or_cni("look up the VRF")? else { return Ok(None) };
    if link.kind != LinkKind::Vrf {
        return Err(CniError::invalid_config(format!(
            "vrfname {name:?}: the container has an interface of that name that is not a VRF (kind {:?})",
            link.kind
        )));
    }
    let table = nl
        .vrf_table(link.index)
        .or_cni("read the VRF's table")?
        .ok_or_else(|| CniError::internal(format!("VRF {name} reports no routing table")))?;
    Ok(Some(Vrf { link, table }))
}

/// What ADD does about the VRF, decided before anything changes.
#[derive(Debug)]
pub enum Plan {
    /// It exists with an acceptable table.
    Use(Vrf),
    /// It must be made, bound to this table.
    Create(u32),
}

/// Checks `table` (0: any) against the namespace's VRFs: an existing VRF of this name
/// must have that table, and a new one must not take the table of another VRF (the
/// two would share one routing table, so neither would be isolated).
pub fn plan(nl: &mut Netlink, name: &str, table: u32) -> Result<Plan, CniError> {
    if let Some(vrf) = find(nl, name)? {
        if table != 0 && vrf.table != table {
            return Err(CniError::invalid_config(format!(
                "table {table}: VRF {name} already exists in the container with table {}",
                vrf.table
            )));
        }
        return Ok(Plan::Use(vrf));
    }
    let vrfs = nl.vrfs().or_cni("list VRFs")?;
    if table == 0 {
        return Ok(Plan::Create(first_free_table(nl, &vrfs)?));
    }
    if let Some(other) = vrfs.iter().find(|v| v.table == table) {
        return Err(CniError::invalid_config(format!(
            "table {table} is already the table of VRF {} in the container",
            other.link.name
        )));
    }
    Ok(Plan::Create(table))
}

/// The lowest table id that no VRF, rule or route of the namespace uses, and that is not
/// one of the kernel's.
fn first_free_table(nl: &mut Netlink, vrfs: &[Vrf]) -> Result<u32, CniError> {
    let mut used: BTreeSet<u32> = vrfs.iter().map(|v| v.table).collect();
    used.extend(RESERVED_TABLES.iter().map(|(t, _)| *t));
    for family in [IpFamily::V4, IpFamily::V6] {
        used.extend(nl.rules(family).or_cni("list rules")?.iter().map(|r| r.table));
        used.extend(nl.routes(family, None).or_cni("list routes")?.iter().map(|r| r.table));
    }
    Ok(lowest_unused(&used))
}

fn lowest_unused(used: &BTreeSet<u32>) -> u32 {
    (1..).find(|t| !used.contains(t)).expect("table ids do not run out")
}

/// Creates the VRF and brings it up (a VRF that is down routes nothing); a VRF that
/// cannot be brought up is removed again.
pub fn create(nl: &mut Netlink, name: &str, table: u32) -> Result<Vrf, CniError> {
    let link = nl
        .add_vrf(&LinkSpec::new(name), table)
        .map_err(|e| CniError::internal(format!("could not create VRF {name} with table {table}: {e}")))?
        .expect("created in the socket's namespace");
    if let Err(e) = nl.set_link_up(link.index) {
        let _ = nl.delete_link(link.index);
        return Err(CniError::internal(format!("could not bring VRF {name} up: {e}")));
    }
    Ok(Vrf { link, table })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_unused_table_skips_taken_ones() {
        assert_eq!(lowest_unused(&BTreeSet::new()), 1);
        assert_eq!(lowest_unused(&[1, 2, 4].into_iter().collect()), 3);
    }
}
