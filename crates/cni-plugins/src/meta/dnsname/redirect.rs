//! The DNAT that brings a network's DNS traffic to the resolver's own port.
//!
//! cni-dnsd listens on `<gateway>:<bindPort>` (1053 unless configured). Queries the
//! containers send to `<gateway>:53` (the nameserver in their result) are redirected there
//! by a rule in a table of the network's own, `inet cni-dns-<hash of the network name>`,
//! hooked at prerouting before dstnat (priority -110). Why not listen on 53 itself:
//! rootful podman reserves a published port by binding it on every address, which Linux
//! refuses next to a listener on one address of the same port, so `-p 53:53` could not
//! start; and a published port 53's own DNAT (portmap's, priority dstnat) would capture the
//! network's DNS. The first NAT rule that matches a new connection decides it, so ours,
//! running first, keeps port 53 on the gateway for the resolver whatever is published.
//!
//! Only queries that arrive on the network's bridge are redirected (`iifname`): the
//! gateway address is local, so Linux would take a packet for it from any interface, and a
//! host's neighbour with a route to the pod subnet, or a container of another network,
//! must not reach the resolver through this rule (the resolver checks again by itself).
//!
//! The table is replaced whole in one transaction (add, delete, add again: idempotent and
//! atomic) and deleted with the network's last attachment.

use cni_net::nft::{priority, proto, Batch, Chain, ChainType, Family, Hook, NftClient, RuleBuilder, Table};
use cni_sdk::CniError;
use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// The port the resolver listens on when the configuration names none.
pub const DEFAULT_BIND_PORT: u16 = 1053;
const CHAIN: &str = "prerouting";

/// `cni-dns-<12 hex digits>`: network names may be up to 255 bytes, table names may not.
pub fn table_name(network: &str) -> String {
    let digest = Sha256::digest(network.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("cni-dns-{hex}")
}

fn nft_error(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::internal(format!("dnsname: {what}: {e}"))
}

/// Installs (or replaces) the redirect of `gateways`' port 53 to `port`, for queries that
/// arrive on `bridge`.
pub fn install(network: &str, bridge: &str, gateways: &[IpAddr], port: u16) -> Result<(), CniError> {
    let name = table_name(network);
    let mut batch = Batch::new();
    let table = Table::new(Family::Inet, &name).with_comment(format!("dnsname {network}"));
    batch.add_table(&table);
    batch.delete_table(Family::Inet, &name);
    batch.add_table(&table);
    batch.add_chain(&Chain::base(
        Family::Inet,
        &name,
        CHAIN,
        ChainType::Nat,
        Hook::Prerouting,
        priority::DSTNAT - 10,
    ));
    for gateway in gateways {
        let host = ipnet::IpNet::from(*gateway);
        for l4 in [proto::UDP, proto::TCP] {
            let rule = RuleBuilder::new(Family::Inet, &name, CHAIN)
                .iifname(bridge)
                .daddr(host)
                .dport(l4, 53)
                .dnat(*gateway, Some(port))
                .build()
                .map_err(|e| nft_error("build the redirect rule", e))?;
            batch.add_rule(&rule);
        }
    }
    let mut nft = NftClient::new().map_err(|e| nft_error("open nftables", e))?;
    nft.commit(&batch).map_err(|e| nft_error(&format!("install table inet {name}"), e))?;
    nft.close_without_waiting();
    Ok(())
}

/// Removes the network's redirect; nothing to do when there is none.
pub fn remove(network: &str) -> Result<(), CniError> {
    let name = table_name(network);
    let mut batch = Batch::new();
    batch.add_table(&Table::new(Family::Inet, &name));
    batch.delete_table(Family::Inet, &name);
    let mut nft = NftClient::new().map_err(|e| nft_error("open nftables", e))?;
    nft.commit(&batch).map_err(|e| nft_error(&format!("delete table inet {name}"), e))?;
    nft.close_without_waiting();
    Ok(())
}
