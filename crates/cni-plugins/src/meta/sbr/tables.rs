//! The rules and tables sbr makes, undoes and checks, over netlink in the container.

use super::{SourceAddress, FIRST_TABLE};
use crate::common::rollback::{Rollback, Undo};
use crate::common::NetResultExt;
use cni_net::netlink::{IpFamily, Route, Rule, MAIN_TABLE};
use cni_net::Idempotent;
use cni_net::{NetNs, Netlink};
use cni_sdk::CniError;
use std::collections::BTreeSet;

/// Tables the kernel reserves (unspec, default, main, local): never emptied by DEL.
const RESERVED_TABLES: [u32; 4] = [0, 253, 254, 255];

fn family_of(address: &SourceAddress) -> IpFamily {
    IpFamily::of(address.address.addr())
}

/// The distinct families of the addresses, in first-seen order.
fn families(addresses: &[SourceAddress]) -> Vec<IpFamily> {
    let mut unique = Vec::new();
    for family in addresses.iter().map(family_of) {
        if !unique.contains(&family) {
            unique.push(family);
        }
    }
    unique
}

fn all_rules(nl: &mut Netlink, families: &[IpFamily]) -> Result<Vec<Rule>, CniError> {
    let mut rules = Vec::new();
    for family in families {
        rules.extend(nl.rules(*family).or_cni("list rules")?);
    }
    Ok(rules)
}

/// The first table id from `start` up that nothing in `used` refers to.
fn next_free_table(used: &BTreeSet<u32>, start: u32) -> u32 {
    (start..).find(|t| !used.contains(t)).expect("table ids do not run out")
}

/// What a partial ADD made, taken back through [`Rollback`] unless the ADD keeps it.
struct Made {
    nl: Option<Netlink>,
    rules: Vec<Rule>,
    routes: Vec<Route>,
    moved_from_main: Vec<Route>,
}

impl Made {
    fn new(ns: &NetNs) -> Rollback<Made> {
        // A socket of its own, so the guard does not hold the caller's borrow.
        let nl = Netlink::in_ns(ns).ok();
        Rollback::new(Made { nl, rules: vec![], routes: vec![], moved_from_main: vec![] })
    }
}

impl Undo for Made {
    fn undo(&mut self) {
        let Some(nl) = self.nl.as_mut() else { return };
        for route in &self.moved_from_main {
            if let Err(e) = nl.add_route(route).ignore_exists() {
                eprintln!("sbr: rollback: cannot put back route {}: {e}", route.destination);
            }
        }
        for route in self.routes.iter().rev() {
            if let Err(e) = nl.delete_route(route).ignore_missing() {
                eprintln!(
                    "sbr: rollback: cannot delete route {} table {}: {e}",
                    route.destination, route.table
                );
            }
        }
        for rule in self.rules.iter().rev() {
            if let Err(e) = nl.delete_rule(rule).ignore_missing() {
                eprintln!("sbr: rollback: cannot delete rule from {:?}: {e}", rule.from);
            }
        }
    }
}

fn add_rule(nl: &mut Netlink, rollback: &mut Rollback<Made>, rule: Rule) -> Result<(), CniError> {
    // The same rule already there (a repeated ADD) is what we want, and not ours to undo.
    let added = nl.add_rule(&rule).ignore_exists();
    if added.map_err(|e| CniError::internal(format!("sbr: failed to add rule: {e}")))?.is_some() {
        rollback.rules.push(rule);
    }
    Ok(())
}

/// With a configured table: only the rules.
pub fn add_rules_to_table(
    ns: &NetNs,
    nl: &mut Netlink,
    addresses: &[SourceAddress],
    table: u32,
) -> Result<(), CniError> {
    let mut rollback = Made::new(ns);
    for address in addresses {
        add_rule(nl, &mut rollback, Rule::from_source(address.host(), table))?;
    }
    rollback.keep();
    Ok(())
}

/// Whether a main-table route of the interface belongs in `address`'s table: its source
/// or gateway is in the address's subnet, or it names neither (a plain link route).
fn belongs_to(route: &Route, address: &SourceAddress) -> bool {
    if IpFamily::of(route.destination.addr()) != family_of(address) {
        return false;
    }
    let in_subnet = |ip: Option<std::net::IpAddr>| ip.is_some_and(|ip| address.address.contains(&ip));
    in_subnet(route.source) || in_subnet(route.gateway) || (route.source.is_none() && route.gateway.is_none())
}

/// Without a configured table: one new table per address, filled from the main table.
pub fn route_by_source(
    ns: &NetNs,
    nl: &mut Netlink,
    ifname: &str,
    addresses: &[SourceAddress],
) -> Result<(), CniError> {
    let link = nl
        .link_by_name(ifname)
        .or_cni("look up the container interface")?
        .ok_or_else(|| CniError::internal(format!("sbr: cannot find network interface {ifname}")))?;
    let both = [IpFamily::V4, IpFamily::V6];
    let mut used: BTreeSet<u32> = all_rules(nl, &both)?.iter().map(|r| r.table).collect();
    let mut main_routes = Vec::new();
    for family in both {
        for route in nl.routes(family, None).or_cni("list routes")? {
            used.insert(route.table);
            if route.table == MAIN_TABLE && route.oif == Some(link.index) && route.nexthops.is_empty() {
                main_routes.push(route);
            }
        }
    }

    let mut rollback = Made::new(ns);
    let mut moved = vec![false; main_routes.len()];
    let mut table = next_free_table(&used, FIRST_TABLE);
    for address in addresses {
        add_rule(nl, &mut rollback, Rule::from_source(address.host(), table))?;
        if let Some(gateway) = address.gateway {
            let default =
                Route::default_route(family_of(address)).gateway(gateway).oif(link.index).table(table);
            nl.add_route(&default).map_err(|e| {
                CniError::internal(format!(
                    "sbr: failed to add default route via {gateway} to table {table}: {e}"
                ))
            })?;
            rollback.routes.push(default);
        }
        for (i, route) in main_routes.iter().enumerate().filter(|(_, r)| belongs_to(r, address)) {
            let mut copy = route.clone();
            copy.table = table;
            // Replace: the default route via the gateway may be the one just added.
            nl.replace_route(&copy).map_err(|e| {
                CniError::internal(format!(
                    "sbr: failed to copy route {} to table {table}: {e}",
                    route.destination
                ))
            })?;
            rollback.routes.push(copy);
            moved[i] = true;
        }
        used.insert(table);
        table = next_free_table(&used, table + 1);
    }
    // Removed only after every copy, so addresses sharing a subnet all find their routes.
    for (route, _) in main_routes.iter().zip(&moved).filter(|(_, m)| **m) {
        let deleted = nl.delete_route(route).ignore_missing().map_err(|e| {
            CniError::internal(format!(
                "sbr: failed to delete route {} from the main table: {e}",
                route.destination
            ))
        })?;
        if deleted.is_some() {
            rollback.moved_from_main.push(route.clone());
        }
    }
    rollback.keep();
    Ok(())
}

/// The interface's global addresses, for a DEL without `prevResult`.
pub fn addresses_on_link(nl: &mut Netlink, ifname: &str) -> Result<Vec<SourceAddress>, CniError> {
    let Some(link) = nl.link_by_name(ifname).or_cni("look up the container interface")? else {
        return Ok(Vec::new());
    };
    Ok(nl
        .addresses(Some(link.index), None)
        .or_cni("list addresses")?
        .into_iter()
        .filter(|a| a.scope == 0)
        .map(|a| SourceAddress { address: a.address, gateway: None })
        .collect())
}

/// Deletes the rules from the addresses (only those to `table`, when configured) and,
/// when sbr chose the tables itself, empties the tables no other rule still uses.
pub fn remove(nl: &mut Netlink, addresses: &[SourceAddress], table: Option<u32>) -> Result<(), CniError> {
    if addresses.is_empty() {
        return Ok(());
    }
    let fams = families(addresses);
    let rules = all_rules(nl, &fams)?;
    let hosts: Vec<_> = addresses.iter().map(SourceAddress::host).collect();
    let mut errors = Vec::new();
    let mut emptied = BTreeSet::new();
    let (ours, others): (Vec<&Rule>, Vec<&Rule>) = rules.iter().partition(|r| {
        r.from.is_some_and(|from| hosts.contains(&from)) && table.is_none_or(|t| r.table == t)
    });
    for rule in ours {
        if let Err(e) = nl.delete_rule(rule).ignore_missing() {
            errors.push(format!("delete rule from {:?} lookup {}: {e}", rule.from, rule.table));
        }
        emptied.insert(rule.table);
    }
    if table.is_none() {
        for t in emptied {
            if RESERVED_TABLES.contains(&t) || others.iter().any(|r| r.table == t) {
                continue;
            }
            for family in [IpFamily::V4, IpFamily::V6] {
                for route in nl.routes(family, Some(t)).or_cni("list routes")? {
                    if let Err(e) = nl.delete_route(&route).ignore_missing() {
                        errors.push(format!("delete route {} from table {t}: {e}", route.destination));
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!("sbr: {}", errors.join("; "))))
    }
}

/// Empties the tables sbr made for interface `ifname` whose rule is gone (deleted by hand,
/// or a crash between the two): a table from [`FIRST_TABLE`] up that no rule refers to,
/// whose every route goes out of the interface and belongs to one of `addresses`, with a
/// default route via the address's gateway — what sbr puts in a table, and not a table of
/// someone else's that merely uses the interface. Without this, DEL would leave such a
/// table behind for good.
pub fn remove_orphaned_tables(
    nl: &mut Netlink,
    ifname: &str,
    addresses: &[SourceAddress],
) -> Result<(), CniError> {
    let Some(link) = nl.link_by_name(ifname).or_cni("look up the container interface")? else {
        return Ok(());
    };
    let referenced: BTreeSet<u32> =
        all_rules(nl, &[IpFamily::V4, IpFamily::V6])?.iter().map(|r| r.table).collect();
    let mut errors = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let mut by_table: std::collections::BTreeMap<u32, Vec<Route>> = Default::default();
        for route in nl.routes(family, None).or_cni("list routes")? {
            if route.table >= FIRST_TABLE && !RESERVED_TABLES.contains(&route.table) {
                by_table.entry(route.table).or_default().push(route);
            }
        }
        for (table, routes) in by_table {
            let ours = |r: &Route| r.oif == Some(link.index) && addresses.iter().any(|a| belongs_to(r, a));
            let default_via_ours = |r: &Route| {
                r.destination.prefix_len() == 0
                    && r.gateway.is_some_and(|gw| addresses.iter().any(|a| a.address.contains(&gw)))
            };
            if referenced.contains(&table) || !routes.iter().all(ours) || !routes.iter().any(default_via_ours)
            {
                continue;
            }
            for route in routes {
                if let Err(e) = nl.delete_route(&route).ignore_missing() {
                    errors.push(format!("delete route {} from table {table}: {e}", route.destination));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!("sbr: {}", errors.join("; "))))
    }
}

/// CHECK: each address has its rule, and (for tables sbr made) the table has the default
/// route via the address's gateway.
pub fn check(nl: &mut Netlink, addresses: &[SourceAddress], table: Option<u32>) -> Result<(), CniError> {
    let rules = all_rules(nl, &families(addresses))?;
    for address in addresses {
        let host = address.host();
        let rule = rules
            .iter()
            .find(|r| r.from == Some(host) && table.is_none_or(|t| r.table == t))
            .ok_or_else(|| CniError::internal(format!("sbr: no rule from {host} in the container")))?;
        if let (None, Some(gateway)) = (table, address.gateway) {
            let routes = nl.routes(family_of(address), Some(rule.table)).or_cni("list routes")?;
            if !routes.iter().any(|r| r.is_default() && r.gateway == Some(gateway)) {
                return Err(CniError::internal(format!(
                    "sbr: table {} has no default route via {gateway} for {host}",
                    rule.table
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_free_table_skips_used_ids() {
        let used: BTreeSet<u32> = [100, 101, 103, 254, 255].into_iter().collect();
        assert_eq!(next_free_table(&used, FIRST_TABLE), 102);
        assert_eq!(next_free_table(&used, 103), 104);
    }

    #[test]
    fn routes_belong_by_source_gateway_or_neither() {
        let address = SourceAddress { address: "10.0.0.2/24".parse().unwrap(), gateway: None };
        let link_route = Route::new("10.0.0.0/24".parse().unwrap());
        assert!(belongs_to(&link_route, &address));
        let via = Route::new("10.9.0.0/16".parse().unwrap()).gateway("10.0.0.1".parse().unwrap());
        assert!(belongs_to(&via, &address));
        let elsewhere = Route::new("10.9.0.0/16".parse().unwrap()).gateway("10.5.0.1".parse().unwrap());
        assert!(!belongs_to(&elsewhere, &address));
        let v6 = Route::new("fe80::/64".parse().unwrap());
        assert!(!belongs_to(&v6, &address), "other-family routes stay for that family's table");
    }

    #[test]
    fn families_are_unique() {
        let a = |s: &str| SourceAddress { address: s.parse().unwrap(), gateway: None };
        assert_eq!(
            families(&[a("10.0.0.2/24"), a("fd00::2/64"), a("10.0.0.3/24")]),
            [IpFamily::V4, IpFamily::V6]
        );
    }
}
