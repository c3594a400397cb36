//! Admission through another owner's forward chain: iptables-nft's `filter FORWARD` with
//! policy DROP, as Docker leaves a host.
//!
//! In nftables a packet must be accepted by every base chain on the forward hook: our own
//! table's accept does not get it past a `policy drop` chain in `ip filter` (or
//! `ip6 filter`). So when an attachment is added and that chain drops, the attachment's
//! traffic — its egress, the replies to it and connections DNATed to it (published ports)
//! — is accepted in a chain of ours in that very table, jumped to from the top of FORWARD
//! (see [`rules`] for the encoding, which is iptables-nft's own). Nothing else is let
//! through: the host's policy stands for every other address. The rules carry the
//! attachment's tag; DEL and GC remove them, and the chain and its jump with the last.
//!
//! Detection is one netlink request per address family (no process spawned): the chain
//! `FORWARD` of table `filter`, its hook and policy. iptables-legacy's tables live in
//! x_tables, which nf_tables cannot see; a host with a legacy `filter` table gets a
//! warning (see [`legacy_filter_tables`]) and nothing else.

pub mod rules;

use std::collections::BTreeSet;
use std::net::IpAddr;

use cni_net::nft::{Batch, Chain, ChainPolicy, Family, Hook, ListedRule, NftClient, NftError};
use cni_net::Idempotent;
use cni_sdk::{Attachment, CniError, GcErrors};

use rules::{CHAIN, FORWARD, TABLE};

const FAMILIES: [Family; 2] = [Family::Ipv4, Family::Ipv6];
/// A commit that races another plugin's (the chain appeared or went meanwhile) is redone
/// from a fresh read; this bounds the redoing.
const ATTEMPTS: usize = 4;

fn nft_error(what: &str, e: NftError) -> CniError {
    CniError::internal(format!("nftables: {what} (table {TABLE}): {e}"))
}

/// Whether `family`'s `filter FORWARD` is a forward-hook base chain whose policy drops.
pub fn forward_drops(nft: &mut NftClient, family: Family) -> Result<bool, CniError> {
    let chain = nft.get_chain(family, TABLE, FORWARD).map_err(|e| nft_error("look up FORWARD", e))?;
    Ok(chain
        .is_some_and(|c| matches!(c.hook, Some((Hook::Forward, _))) && c.policy == Some(ChainPolicy::Drop)))
}

/// The legacy (x_tables) filter tables of this namespace, by family name: nf_tables
/// cannot read their policy, so the firewall can only say they are there. Reads
/// `/proc/net/ip{,6}_tables_names` (absent when the modules are not loaded).
pub fn legacy_filter_tables() -> Vec<&'static str> {
    [("iptables", "/proc/net/ip_tables_names"), ("ip6tables", "/proc/net/ip6_tables_names")]
        .into_iter()
        .filter(|(_, path)| {
            std::fs::read_to_string(path).is_ok_and(|names| names.lines().any(|n| n == "filter"))
        })
        .map(|(name, _)| name)
        .collect()
}

fn our_rules(nft: &mut NftClient, family: Family) -> Result<Option<Vec<ListedRule>>, CniError> {
    if nft.get_chain(family, TABLE, CHAIN).map_err(|e| nft_error("look up our chain", e))?.is_none() {
        return Ok(None);
    }
    let rules = nft.list_rules(family, TABLE, CHAIN).ignore_missing();
    rules.map_err(|e| nft_error("list our chain", e))
}

fn jumps(nft: &mut NftClient, family: Family) -> Result<Vec<ListedRule>, CniError> {
    let rules = nft.list_rules(family, TABLE, FORWARD).ignore_missing();
    let rules = rules.map_err(|e| nft_error("list FORWARD", e))?.unwrap_or_default();
    Ok(rules.into_iter().filter(rules::is_jump_to_ours).collect())
}

/// Commits the batch `build` makes from a fresh read, again when a concurrent change
/// made it stale (an object it expects is gone, or one it creates is there).
fn commit_fresh(
    nft: &mut NftClient,
    what: &str,
    mut build: impl FnMut(&mut NftClient) -> Result<Option<Batch>, CniError>,
) -> Result<(), CniError> {
    for attempt in 1..=ATTEMPTS {
        let Some(batch) = build(nft)? else { return Ok(()) };
        match nft.commit(&batch) {
            Ok(_) => return Ok(()),
            Err(e)
                if attempt < ATTEMPTS
                    && (e.is_not_found() || e.is_already_exists() || e.errno() == Some(libc::EBUSY)) => {}
            Err(e) => return Err(nft_error(what, e)),
        }
    }
    unreachable!("the last attempt returns")
}

/// ADD: admits the attachment's addresses in every family whose FORWARD drops. A retried
/// ADD replaces the attachment's earlier rules.
pub fn add(nft: &mut NftClient, network: &str, who: &Attachment, ips: &[IpAddr]) -> Result<(), CniError> {
    for family in FAMILIES {
        let ips: Vec<&IpAddr> = ips.iter().filter(|ip| rules::family_of(ip) == family).collect();
        if ips.is_empty() || !forward_drops(nft, family)? {
            continue;
        }
        let (tag, key) = (rules::tag(network, who), rules::attachment_key(network, who));
        commit_fresh(nft, "admit the container's forwarded traffic", |nft| {
            let mut batch = Batch::new();
            match our_rules(nft, family)? {
                None => {
                    // Exclusive: of two ADDs racing to make the chain, the second redoes.
                    batch.create_chain(&Chain::regular(family, TABLE, CHAIN));
                    batch.insert_rule(&rules::jump_rule(family));
                }
                Some(existing) => {
                    for rule in existing.iter().filter(|r| is_of(r, &key)) {
                        batch.delete_rule(family, TABLE, CHAIN, rule.handle);
                    }
                    if jumps(nft, family)?.is_empty() {
                        batch.insert_rule(&rules::jump_rule(family));
                    }
                }
            }
            for ip in &ips {
                for rule in rules::admission_rules(ip, &tag) {
                    batch.add_rule(&rule);
                }
            }
            Ok(Some(batch))
        })?;
    }
    Ok(())
}

fn is_of(rule: &ListedRule, key: &str) -> bool {
    rules::rule_tag(rule).is_some_and(|t| rules::parse_tag(&t).is_some_and(|(_, att)| att == key))
}

/// Removes the rules `selected` picks from our chain in `family`; with them gone and
/// nothing else left in it, the chain and FORWARD's jump to it go too, so the table ends
/// as it was before the first attachment. Nothing to remove: one lookup, no commit.
fn withdraw(
    nft: &mut NftClient,
    family: Family,
    selected: &dyn Fn(&ListedRule) -> bool,
) -> Result<(), CniError> {
    commit_fresh(nft, "remove the container's admission", |nft| {
        let Some(existing) = our_rules(nft, family)? else { return Ok(None) };
        let mine: Vec<&ListedRule> = existing.iter().filter(|r| selected(r)).collect();
        if mine.is_empty() && !existing.is_empty() {
            return Ok(None);
        }
        let mut batch = Batch::new();
        for rule in &mine {
            batch.delete_rule(family, TABLE, CHAIN, rule.handle);
        }
        if mine.len() == existing.len() {
            for jump in jumps(nft, family)? {
                batch.delete_rule(family, TABLE, FORWARD, jump.handle);
            }
            batch.delete_chain(family, TABLE, CHAIN);
        }
        Ok(Some(batch))
    })
}

/// DEL: idempotent, needs neither prevResult nor the namespace (the tag names the
/// attachment); runs whatever the policy is now, which may have changed since ADD.
pub fn del(nft: &mut NftClient, network: &str, who: &Attachment) -> Result<(), CniError> {
    let key = rules::attachment_key(network, who);
    let mut result = Ok(());
    for family in FAMILIES {
        result = result.and(withdraw(nft, family, &|r| is_of(r, &key)));
    }
    result
}

/// GC: removes this network's admissions whose attachment is not in `valid`.
pub fn gc(nft: &mut NftClient, network: &str, valid: &[Attachment]) -> Result<(), GcErrors> {
    let keep: BTreeSet<String> = valid.iter().map(|who| rules::attachment_key(network, who)).collect();
    let ours = nft_attach_network(network);
    let stale = |rule: &ListedRule| {
        rules::rule_tag(rule).is_some_and(|t| {
            rules::parse_tag(&t).is_some_and(|(net, att)| net == ours && !keep.contains(att))
        })
    };
    let mut errors = GcErrors::new();
    for family in FAMILIES {
        errors.record(format!("chain {} {TABLE} {CHAIN}", family.nft_name()), withdraw(nft, family, &stale));
    }
    errors.into_result()
}

/// `net=<hash>`: the network word of a tag.
fn nft_attach_network(network: &str) -> String {
    let tag = crate::common::nft_attach::network_tag(network);
    tag.rsplit(' ').next().unwrap_or_default().to_string()
}

/// CHECK: where FORWARD drops, each of the attachment's addresses must have its rules and
/// FORWARD its jump to our chain.
pub fn check(nft: &mut NftClient, network: &str, who: &Attachment, ips: &[IpAddr]) -> Result<(), CniError> {
    let key = rules::attachment_key(network, who);
    for family in FAMILIES {
        let wanted = ips.iter().filter(|ip| rules::family_of(ip) == family).count();
        if wanted == 0 || !forward_drops(nft, family)? {
            continue;
        }
        let have = our_rules(nft, family)?.unwrap_or_default().iter().filter(|r| is_of(r, &key)).count();
        let missing = if have < wanted * 3 {
            Some("rules accepting its forwarded traffic")
        } else if jumps(nft, family)?.is_empty() {
            Some("the jump to them")
        } else {
            None
        };
        if let Some(what) = missing {
            return Err(CniError::internal(format!(
                "{} {TABLE} {FORWARD} drops forwarded traffic and {what} ({CHAIN}) are missing for container {} ({})",
                family.nft_name(),
                who.container_id,
                who.ifname
            )));
        }
    }
    Ok(())
}
