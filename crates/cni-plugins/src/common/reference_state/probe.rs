//! Whether the reference plugins may have left something in a table, answered without
//! starting a process: DEL runs on every container stop, and almost always there is
//! nothing of the reference's to find.
//!
//! The reference runs `iptables`, whichever variant the host's alternatives point to.
//! `iptables-nft` (Debian's default) keeps its tables in nf_tables (`ip nat`,
//! `ip6 filter`, ...), where one netlink request asks for a chain by name. The legacy
//! variant's tables cannot be read over netlink, but the kernel lists the ones that exist
//! in `/proc/net/ip_tables_names`: only where that names the table is `iptables-save` run.

use std::path::Path;

use cni_net::nft::{Family, NftClient};
use cni_sdk::CniError;

use crate::common::iptables::{find_program, Proto};

/// Where the host's `iptables` keeps its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Nft,
    Legacy,
    /// A build that says neither in its name: both places are looked at.
    Unknown,
}

/// The variant `iptables-save` of `proto` is (the multi-call binary's name says it), or
/// `None` when it is not installed: then the reference could not have run either.
fn variant(proto: Proto) -> Option<Variant> {
    let program = find_program(&proto.tool("save"))?;
    let real = std::fs::canonicalize(&program).unwrap_or(program);
    let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Some(if name.contains("legacy") {
        Variant::Legacy
    } else if name.contains("nft") {
        Variant::Nft
    } else {
        Variant::Unknown
    })
}

fn family(proto: Proto) -> Family {
    match proto {
        Proto::V4 => Family::Ipv4,
        Proto::V6 => Family::Ipv6,
    }
}

/// Whether the legacy variant has `table` in this namespace.
fn legacy_has_table(proto: Proto, table: &str) -> bool {
    let list = match proto {
        Proto::V4 => "/proc/net/ip_tables_names",
        Proto::V6 => "/proc/net/ip6_tables_names",
    };
    std::fs::read_to_string(Path::new(list)).is_ok_and(|names| names.lines().any(|n| n.trim() == table))
}

fn nft_client() -> Result<crate::common::nft_attach::Client, CniError> {
    NftClient::new()
        .map(Into::into)
        .map_err(|e| CniError::internal(format!("nftables (looking for the reference plugins' rules): {e}")))
}

/// Whether any of `chains` may exist in `table` of `proto`.
pub fn any_chain(proto: Proto, table: &str, chains: &[String]) -> Result<bool, CniError> {
    let Some(variant) = variant(proto) else { return Ok(false) };
    if variant != Variant::Nft && legacy_has_table(proto, table) {
        return Ok(true);
    }
    if variant == Variant::Legacy {
        return Ok(false);
    }
    let mut nft = nft_client()?;
    for chain in chains {
        let found = nft
            .get_chain(family(proto), table, chain)
            .map_err(|e| CniError::internal(format!("nftables: {e}")))?;
        if found.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `table` of `proto` may hold a chain whose name `wanted` accepts (for GC,
/// which cannot name the chains in advance).
pub fn any_chain_like(proto: Proto, table: &str, wanted: impl Fn(&str) -> bool) -> Result<bool, CniError> {
    let Some(variant) = variant(proto) else { return Ok(false) };
    if variant != Variant::Nft && legacy_has_table(proto, table) {
        return Ok(true);
    }
    if variant == Variant::Legacy {
        return Ok(false);
    }
    let chains = nft_client()?
        .list_chains(family(proto), table)
        .or_else(|e| if e.is_not_found() { Ok(Vec::new()) } else { Err(e) })
        .map_err(|e| CniError::internal(format!("nftables: {e}")))?;
    Ok(chains.iter().any(|c| wanted(&c.name)))
}
