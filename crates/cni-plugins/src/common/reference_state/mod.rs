//! What the Go reference plugins left on a node that was swapped to ours while their
//! containers ran: their iptables/ip6tables chains, found by the names the reference
//! gives them and removed when ours stops (DEL) or collects (GC) those attachments.
//!
//! The reference names an attachment's chains `CNI-` + an optional infix + the hex
//! SHA-512 of network name and container ID, cut to 28 characters:
//!
//! | plugin | table | chain | reached from |
//! |---|---|---|---|
//! | bridge, ptp (`ipMasq`) | `nat` | `CNI-<hash>` | `POSTROUTING -s <ip>` |
//! | portmap | `nat` | `CNI-DN-<hash>` | `CNI-HOSTPORT-DNAT` (one entry per protocol/port group) |
//! | portmap (before 0.x) | `nat` | `CNI-SN-<hash>` | `CNI-HOSTPORT-SNAT` |
//!
//! Their rules carry the comments `name: "<net>" id: "<id>"` (masquerade) and
//! `dnat name: "<net>" id: "<id>"` (portmap's entries), which is how GC, given only the
//! attachments still in use, attributes a chain: the comment names the owner, and the
//! chain's name must be that owner's hash, so an administrator's chain is never taken.
//! Shared chains (`CNI-HOSTPORT-DNAT`, `-SETMARK`, `-MASQ`, the firewall's `CNI-FORWARD`)
//! stay, as the reference leaves them. The firewall's per-address rules carry no owner;
//! its DEL removes them by address (see the firewall's iptables backend).
//!
//! Cost: DEL asks nf_tables for the attachment's chain by name ([`probe`]), one netlink
//! round trip on the plugin's own nftables client (a second socket, released at once,
//! would flush the kernel's pending destruction of the previous DEL's rules while holding
//! the commit mutex the next commit needs) and no process; only when a chain is there does it run one `iptables-save`
//! and one `iptables-restore --noflush` per address family.

mod probe;
pub mod saved;

use cni_net::nft::NftClient;
use cni_sdk::{Attachment, CniError};
use sha2::{Digest, Sha512};
use std::collections::HashSet;

use crate::common::iptables::{self, Proto};
use saved::SavedTable;

pub use probe::any_rule_with_address;

const NAT: &str = "nat";
const FAMILIES: [Proto; 2] = [Proto::V4, Proto::V6];
/// The reference's chain-name length (iptables allows 28 characters).
const CHAIN_LEN: usize = 28;
const MASQUERADE_INFIX: &str = "";
const PORTMAP_INFIX: &str = "DN-";
const OLD_PORTMAP_INFIX: &str = "SN-";

/// The reference's chain name for an attachment: `CNI-<infix><sha512(network + id)>`,
/// 28 characters.
pub fn chain_name(network: &str, container_id: &str, infix: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let mut name = format!("CNI-{infix}{hex}");
    name.truncate(CHAIN_LEN);
    name
}

/// Whether `name` has the shape of a reference chain with `infix`.
fn has_chain_shape(name: &str, infix: &str) -> bool {
    name.len() == CHAIN_LEN
        && name
            .strip_prefix("CNI-")
            .and_then(|r| r.strip_prefix(infix))
            .is_some_and(|hash| hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// `(network, container ID)` from a comment `<lead>name: "<net>" id: "<id>"`.
fn owner(comment: &str, lead: &str) -> Option<(String, String)> {
    let rest = comment.strip_prefix(lead)?.strip_prefix("name: \"")?.strip_suffix('"')?;
    let (network, id) = rest.split_once("\" id: \"")?;
    Some((network.to_string(), id.to_string()))
}

/// Removes `chains` of `table` and the rules that jump to them, in both families, where
/// any of them is present.
fn remove_chains(nft: &mut NftClient, table: &str, chains: &[String]) -> Result<(), CniError> {
    for proto in FAMILIES {
        if !probe::any_chain(nft, proto, table, chains)? {
            continue;
        }
        let _lock = iptables::lock()?;
        let saved = SavedTable::parse(&iptables::save(proto, table)?, table);
        if let Some(script) = saved::removal_script(&saved, table, chains) {
            iptables::restore(proto, &script)?;
        }
    }
    Ok(())
}

/// The reference's masquerade chain of this attachment (bridge and ptp `ipMasq`), with
/// its `POSTROUTING` jumps; ip6tables too.
pub fn remove_masquerade(nft: &mut NftClient, network: &str, container_id: &str) -> Result<(), CniError> {
    remove_chains(nft, NAT, &[chain_name(network, container_id, MASQUERADE_INFIX)])
}

/// portmap's per-attachment chains (the current `CNI-DN-` and the old `CNI-SN-`) and
/// their entries in the shared chains.
pub fn remove_portmap(nft: &mut NftClient, network: &str, container_id: &str) -> Result<(), CniError> {
    remove_chains(
        nft,
        NAT,
        &[
            chain_name(network, container_id, PORTMAP_INFIX),
            chain_name(network, container_id, OLD_PORTMAP_INFIX),
        ],
    )
}

/// How GC attributes one plugin's chains.
struct Attribution {
    infix: &'static str,
    /// What the owner comment starts with before `name: "`.
    comment_lead: &'static str,
}

const MASQUERADE: Attribution = Attribution { infix: MASQUERADE_INFIX, comment_lead: "" };
const PORTMAP: Attribution = Attribution { infix: PORTMAP_INFIX, comment_lead: "dnat " };

/// The chains of `saved` that the reference made for an attachment of `network` that
/// `valid` no longer lists. The reference ignores the interface name here, so a chain
/// stays while any of the container's attachments is valid.
fn stale_chains(saved: &SavedTable, how: &Attribution, network: &str, valid: &HashSet<&str>) -> Vec<String> {
    saved
        .chains
        .iter()
        .filter(|chain| has_chain_shape(chain, how.infix))
        .filter(|chain| {
            let mut rules = saved.rules_of(chain).chain(saved.jumps_to(chain).map(|(_, r)| r.as_str()));
            let owner = rules.find_map(|rule| saved::comment(rule).and_then(|c| owner(&c, how.comment_lead)));
            owner.is_some_and(|(net, id)| {
                net == network && !valid.contains(id.as_str()) && chain_name(&net, &id, how.infix) == **chain
            })
        })
        .cloned()
        .collect()
}

fn gc(nft: &mut NftClient, how: &Attribution, network: &str, valid: &[Attachment]) -> Result<(), CniError> {
    let valid: HashSet<&str> = valid.iter().map(|a| a.container_id.as_str()).collect();
    for proto in FAMILIES {
        if !probe::any_chain_like(nft, proto, NAT, |name| has_chain_shape(name, how.infix))? {
            continue;
        }
        let _lock = iptables::lock()?;
        let saved = SavedTable::parse(&iptables::save(proto, NAT)?, NAT);
        let stale = stale_chains(&saved, how, network, &valid);
        if let Some(script) = saved::removal_script(&saved, NAT, &stale) {
            iptables::restore(proto, &script)?;
        }
    }
    Ok(())
}

/// GC of the reference's masquerade chains of `network`.
pub fn gc_masquerade(nft: &mut NftClient, network: &str, valid: &[Attachment]) -> Result<(), CniError> {
    gc(nft, &MASQUERADE, network, valid)
}

/// GC of the reference's portmap chains of `network`.
pub fn gc_portmap(nft: &mut NftClient, network: &str, valid: &[Attachment]) -> Result<(), CniError> {
    gc(nft, &PORTMAP, network, valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_reference_hashes() {
        // Computed by the reference's FormatChainName / MustFormatChainNameWithPrefix.
        assert_eq!(chain_name("arnet", "ctr1", ""), "CNI-138db050aec482520f2f8624");
        assert_eq!(chain_name("arnet", "ctr1", "DN-"), "CNI-DN-138db050aec482520f2f8");
        assert!(has_chain_shape("CNI-DN-138db050aec482520f2f8", "DN-"));
        assert!(!has_chain_shape("CNI-HOSTPORT-DNAT", ""));
        assert!(!has_chain_shape("CNI-DN-138db050aec482520f2f8", ""));
    }

    #[test]
    fn owners_come_from_the_comments() {
        assert_eq!(owner(r#"name: "n" id: "c""#, ""), Some(("n".into(), "c".into())));
        assert_eq!(owner(r#"dnat name: "n" id: "c""#, "dnat "), Some(("n".into(), "c".into())));
        assert_eq!(owner(r#"dnat name: "n" id: "c""#, ""), None);
        assert_eq!(owner("CNI portfwd masquerade mark", ""), None);
    }

    fn saved_with(chains: &[(&str, &str, &str)]) -> SavedTable {
        let mut text = String::from("*nat\n:POSTROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n");
        for (chain, _, _) in chains {
            text.push_str(&format!(":{chain} - [0:0]\n"));
        }
        for (chain, net, id) in chains {
            let c = format!("\"name: \\\"{net}\\\" id: \\\"{id}\\\"\"");
            text.push_str(&format!("-A POSTROUTING -s 10.0.0.2/32 -m comment --comment {c} -j {chain}\n"));
            text.push_str(&format!("-A {chain} ! -d 224.0.0.0/4 -m comment --comment {c} -j MASQUERADE\n"));
        }
        text.push_str("COMMIT\n");
        SavedTable::parse(&text, "nat")
    }

    #[test]
    fn gc_takes_only_stale_chains_of_its_network_whose_name_matches_the_owner() {
        let gone = chain_name("net", "gone", "");
        let alive = chain_name("net", "alive", "");
        let other_net = chain_name("other", "gone", "");
        // An administrator's chain of the same shape claiming an owner it is not named for.
        let forged = "CNI-0000000000000000000000aa".to_string();
        let saved = saved_with(&[
            (&gone, "net", "gone"),
            (&alive, "net", "alive"),
            (&other_net, "other", "gone"),
            (&forged, "net", "gone2"),
        ]);
        let valid: HashSet<&str> = ["alive"].into_iter().collect();
        assert_eq!(stale_chains(&saved, &MASQUERADE, "net", &valid), vec![gone]);
    }
}
