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

use std::net::IpAddr;

use cni_net::nft::{Expr, Family, NftClient, NftError};
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

/// Answers "may `table` of `proto` hold it?": from the variant and the legacy table list,
/// then, for iptables-nft, by `question` over netlink. A question nf_tables could not
/// answer does not mean "no": `iptables-save` then looks, slower but right (and its own
/// failure is the error DEL reports).
fn ask(
    nft: &mut NftClient,
    proto: Proto,
    table: &str,
    question: impl FnOnce(&mut NftClient) -> Result<bool, NftError>,
) -> Result<bool, CniError> {
    let Some(variant) = variant(proto) else { return Ok(false) };
    if variant != Variant::Nft && legacy_has_table(proto, table) {
        return Ok(true);
    }
    if variant == Variant::Legacy {
        return Ok(false);
    }
    let answer = question(nft).or_else(|e| if e.is_not_found() { Ok(false) } else { Err(e) });
    Ok(answer.unwrap_or_else(|e| {
        eprintln!("nftables (looking for the reference plugins' rules): {e}; asking iptables-save");
        true
    }))
}

/// Whether any of `chains` may exist in `table` of `proto`.
pub fn any_chain(
    nft: &mut NftClient,
    proto: Proto,
    table: &str,
    chains: &[String],
) -> Result<bool, CniError> {
    ask(nft, proto, table, |nft| {
        for chain in chains {
            if nft.get_chain(family(proto), table, chain)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    })
}

/// Whether `table` of `proto` may hold a chain whose name `wanted` accepts (for GC,
/// which cannot name the chains in advance).
pub fn any_chain_like(
    nft: &mut NftClient,
    proto: Proto,
    table: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<bool, CniError> {
    ask(nft, proto, table, |nft| Ok(nft.list_chains(family(proto), table)?.iter().any(|c| wanted(&c.name))))
}

/// Whether a rule of `chain` in `table` of `proto` may match one of `ips` as a whole
/// address (the firewall's `-s <ip>/32`, `-d <ip>/32`): iptables-nft compiles such a
/// match into a comparison with the address's bytes, which the chain's rules are
/// searched for. The firewall's shared `CNI-FORWARD` chain stays on a swapped node for
/// good, so its mere presence would cost every later DEL an `iptables-save`.
pub fn any_rule_with_address(
    nft: &mut NftClient,
    proto: Proto,
    table: &str,
    chain: &str,
    ips: &[IpAddr],
) -> Result<bool, CniError> {
    if ips.is_empty() {
        return Ok(false);
    }
    let wanted: Vec<Vec<u8>> = ips
        .iter()
        .map(|ip| match ip {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        })
        .collect();
    ask(nft, proto, table, |nft| {
        let rules = nft.list_rules(family(proto), table, chain)?;
        let mut exprs = rules.iter().flat_map(|r| &r.rule.exprs);
        Ok(exprs.any(|expr| matches!(expr, Expr::Cmp { data, .. } if wanted.contains(data))))
    })
}
