//! The nftables layout of portmap, and adding/removing one attachment's part of it.
//!
//! ```text
//! table inet cni_portmap {
//!   map hostip_ports4 { type ipv4_addr . inet_proto . inet_service : verdict }  # hostIP given
//!   map hostip_ports6 { type ipv6_addr . inet_proto . inet_service : verdict }
//!   map ports4 { type inet_proto . inet_service : verdict }                     # any local address
//!   map ports6 { type inet_proto . inet_service : verdict }
//!   chain prerouting  { type nat hook prerouting priority dstnat; fib daddr type local jump hostports }
//!   chain output      { type nat hook output priority dstnat;     fib daddr type local jump hostports }
//!   chain hostports {
//!     ip daddr . meta l4proto . th dport vmap @hostip_ports4
//!     ip6 daddr . meta l4proto . th dport vmap @hostip_ports6
//!     meta nfproto ipv4 meta l4proto . th dport vmap @ports4
//!     meta nfproto ipv6 meta l4proto . th dport vmap @ports6
//!   }
//!   chain postrouting { type nat hook postrouting priority srcnat;
//!                       meta mark & 0x2000 != 0 jump masq-bit-13 }   # one per markMasqBit in use
//!   chain masq-bit-13 { masquerade }
//!   chain cni-<hash of network, containerID, ifname> {                # one per attachment
//!     ... tcp dport 8080 ip saddr 127.0.0.0/8 meta mark set mark | 0x2000   # snat: localhost (v4)
//!     ... tcp dport 8080 ip saddr <container> meta mark set mark | 0x2000   # snat: hairpin
//!     ... tcp dport 8080 dnat ip to <container>:80
//!     counter comment "cni-rs net=<hash of network> key=hostport v4 tcp 8080"
//!   }
//! }
//! ```
//!
//! The attachment chains, their map elements and their tags are [`nft_attach`]'s, as for
//! masquerading, the MAC spoof check and the firewall: a dispatch key is one (family,
//! protocol, host port[, host IP]), written as its [`DispatchKey::key`]. ADD adds the chain
//! and elements in one atomic batch; DEL lists only its own chain, then deletes the
//! elements and the chain in one batch — nothing scales with the number of other
//! containers. GC lists the table's chains (the one operation that must look at
//! everything), and drops the table when no attachment is left, so an idle host's ruleset
//! is exactly as before.
//!
//! Cost, measured with 1 000 attachments: an ADD is one small netlink round trip (the
//! masquerade chain of its mark bit, with `snat`) and one commit, flat. A DEL is one
//! listing of its chain and one commit. Releasing the nfnetlink socket after a commit that
//! deleted something waits for an RCU grace period; the plugin does not pay it, since its
//! client hands the socket to a detached helper (see `NftClient::close_without_waiting`).

use super::config::{PortmapConf, Protocol, DEFAULT_MARK_MASQ_BIT};
use crate::common::nft_attach::{self, DispatchTable};
use cni_net::nft::{
    priority, Batch, Chain, ChainType, CmpOp, Expr, Family, Field, Hook, KeyType, KeyValue, MapData, MetaKey,
    NftClient, NftError, Register, RuleBuilder, Set, SetElement, SetRef, Verdict,
};
use cni_net::Idempotent;
use cni_sdk::{Attachment, CniError, GcErrors};
use ipnet::IpNet;
use std::net::IpAddr;

pub const TABLE: &str = "cni_portmap";
const FAMILY: Family = Family::Inet;
const HOSTPORTS: &str = "hostports";
const POSTROUTING: &str = "postrouting";
/// Attachment chains are named by [`nft_attach::chain_name`].
const ATTACHMENT_PREFIX: &str = "cni-";
const KEY_PREFIX: &str = "hostport ";
/// `NFPROTO_IPV4` / `NFPROTO_IPV6`, what `meta nfproto` reads.
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

fn nft_error(what: &str, e: NftError) -> CniError {
    CniError::internal(format!("nftables: {what}: {e}"))
}

/// Which map element sends a connection to an attachment's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DispatchKey {
    pub v6: bool,
    pub protocol: Protocol,
    pub host_port: u16,
    pub host_ip: Option<IpAddr>,
}

impl DispatchKey {
    /// The key as [`nft_attach`] records it in the chain's tags (and as errors name it).
    pub fn key(&self) -> String {
        let family = if self.v6 { "v6" } else { "v4" };
        let mut text = format!("{KEY_PREFIX}{family} {} {}", self.protocol, self.host_port);
        if let Some(ip) = self.host_ip {
            text += &format!(" {ip}");
        }
        text
    }

    pub fn parse_key(key: &str) -> Option<DispatchKey> {
        let mut parts = key.strip_prefix(KEY_PREFIX)?.split(' ');
        let v6 = match parts.next()? {
            "v4" => false,
            "v6" => true,
            _ => return None,
        };
        let protocol = Protocol::parse(parts.next()?)?;
        let host_port = parts.next()?.parse().ok()?;
        let host_ip = parts.next().map(str::parse::<IpAddr>).transpose().ok()?;
        if parts.next().is_some() || host_ip.is_some_and(|ip| ip.is_ipv6() != v6) {
            return None;
        }
        Some(DispatchKey { v6, protocol, host_port, host_ip })
    }

    fn element(&self, chain: &str) -> (SetRef, SetElement) {
        let proto = KeyValue::Proto(self.protocol.number());
        let port = KeyValue::Port(self.host_port);
        let (map, key) = match (self.host_ip, self.v6) {
            (Some(IpAddr::V4(ip)), _) => ("hostip_ports4", vec![KeyValue::Ipv4(ip), proto, port]),
            (Some(IpAddr::V6(ip)), _) => ("hostip_ports6", vec![KeyValue::Ipv6(ip), proto, port]),
            (None, false) => ("ports4", vec![proto, port]),
            (None, true) => ("ports6", vec![proto, port]),
        };
        let element = SetElement::new(&key).with_verdict(Verdict::Jump(chain.to_string()));
        (SetRef::named(FAMILY, TABLE, map), element)
    }
}

/// One mapping for one address family of the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub key: DispatchKey,
    pub container_ip: IpAddr,
    pub container_port: u16,
}

fn rule(chain: &str) -> RuleBuilder {
    RuleBuilder::new(FAMILY, TABLE, chain)
}

/// `meta nfproto ipv4|ipv6`: every rule of an attachment chain is family-guarded, since
/// one chain serves both families.
fn family_is(rule: RuleBuilder, v6: bool) -> RuleBuilder {
    let nfproto = if v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 };
    rule.expr(Expr::Meta { key: MetaKey::NfProto, dreg: Register::R1 }).expr(Expr::Cmp {
        sreg: Register::R1,
        op: CmpOp::Eq,
        data: vec![nfproto],
    })
}

fn host(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

fn build(rule: RuleBuilder) -> cni_net::nft::Rule {
    rule.build().expect("static portmap rules are valid")
}

/// portmap's table for [`nft_attach`].
pub struct PortmapTable;

impl DispatchTable for PortmapTable {
    const FAMILY: Family = FAMILY;
    const TABLE: &'static str = TABLE;

    /// Base chains, maps and dispatch rules, and the masquerade chain of the default mark
    /// bit (so that a table made again after a GC dropped it has the usual one at once).
    fn bootstrap(batch: &mut Batch) {
        let map = |name: &str, key: &[KeyType]| Set::named(FAMILY, TABLE, name, key).map_to(MapData::Verdict);
        let proto_port = [KeyType::InetProto, KeyType::InetService];
        let hostip4 = batch
            .add_set(&map("hostip_ports4", &[KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService]));
        let hostip6 = batch
            .add_set(&map("hostip_ports6", &[KeyType::Ipv6Addr, KeyType::InetProto, KeyType::InetService]));
        let ports4 = batch.add_set(&map("ports4", &proto_port));
        let ports6 = batch.add_set(&map("ports6", &proto_port));
        batch.add_chain(&Chain::regular(FAMILY, TABLE, HOSTPORTS));
        for (name, hook) in [("prerouting", Hook::Prerouting), ("output", Hook::Output)] {
            batch.add_chain(&Chain::base(FAMILY, TABLE, name, ChainType::Nat, hook, priority::DSTNAT));
            batch.add_rule(&build(rule(name).fib_daddr_local().jump(HOSTPORTS)));
        }
        batch.add_chain(&Chain::base(
            FAMILY,
            TABLE,
            POSTROUTING,
            ChainType::Nat,
            Hook::Postrouting,
            priority::SRCNAT,
        ));
        batch.add_rule(&build(
            rule(HOSTPORTS).load_key(&[Field::IpDaddr, Field::L4Proto, Field::DstPort]).vmap(&hostip4),
        ));
        batch.add_rule(&build(
            rule(HOSTPORTS).load_key(&[Field::Ip6Daddr, Field::L4Proto, Field::DstPort]).vmap(&hostip6),
        ));
        for (v6, map) in [(false, &ports4), (true, &ports6)] {
            let dispatch =
                family_is(rule(HOSTPORTS), v6).load_key(&[Field::L4Proto, Field::DstPort]).vmap(map);
            batch.add_rule(&build(dispatch));
        }
        add_masq_bit(batch, DEFAULT_MARK_MASQ_BIT);
    }

    fn elements(key: &str, chain: &str) -> Result<Vec<(SetRef, SetElement)>, CniError> {
        let key = DispatchKey::parse_key(key)
            .ok_or_else(|| CniError::internal(format!("bad port mapping key {key:?}")))?;
        Ok(vec![key.element(chain)])
    }

    fn key_taken(key: &str) -> CniError {
        match DispatchKey::parse_key(key) {
            Some(key) => conflict(&key),
            None => CniError::internal(format!("nftables: {key} is already mapped to another container")),
        }
    }
}

fn masq_chain(bit: u32) -> String {
    format!("masq-bit-{bit}")
}

/// The chain that masquerades packets carrying mark bit `bit`, and the postrouting rule
/// that sends them there.
fn add_masq_bit(batch: &mut Batch, bit: u32) {
    let chain = masq_chain(bit);
    batch.create_chain(&Chain::regular(FAMILY, TABLE, chain.clone()));
    batch.add_rule(&build(rule(&chain).masquerade()));
    batch.add_rule(&build(rule(POSTROUTING).mark_any(1 << bit).jump(chain)));
}

/// Whether mark bit `bit`'s masquerade chain has its rule (false without the table).
fn has_masq_bit(nft: &mut NftClient, bit: u32) -> Result<bool, CniError> {
    let rules = nft.list_rules(FAMILY, TABLE, &masq_chain(bit)).ignore_missing();
    let rules = rules.map_err(|e| nft_error("list the masquerade chain", e))?;
    Ok(rules.is_some_and(|rules| !rules.is_empty()))
}

/// Makes sure the postrouting rule for mark bit `bit` exists. Networks may use different
/// bits; each bit's rule is added once, race-free: its chain is created exclusively in the
/// same batch as the rule, so EEXIST means both are already there.
pub fn ensure_masq_bit(nft: &mut NftClient, bit: u32) -> Result<(), CniError> {
    // Look first: a refused batch is costly (the kernel takes ~10 ms to abort it).
    if has_masq_bit(nft, bit)? {
        return Ok(());
    }
    let mut batch = Batch::new();
    add_masq_bit(&mut batch, bit);
    let commit = |nft: &mut NftClient| nft.commit(&batch).ignore_exists().map(drop);
    match commit(nft) {
        Ok(()) => Ok(()),
        // No table yet (the first attachment on this host): its bootstrap may well have
        // made this bit's chain (the default one), so look again before adding it.
        Err(e) if e.is_not_found() => {
            nft_attach::ensure_table::<PortmapTable>(nft)?;
            if has_masq_bit(nft, bit)? {
                return Ok(());
            }
            commit(nft).map_err(|e| nft_error("add the masquerade rule", e))
        }
        Err(e) => Err(nft_error("add the masquerade rule", e)),
    }
}

/// The rules of one attachment's chain.
fn attachment_rules(conf: &PortmapConf, chain: &str, targets: &[Target]) -> Vec<RuleBuilder> {
    let mark = 1u32 << conf.mark_masq_bit;
    let mut rules = Vec::new();
    for t in targets {
        let v6 = t.key.v6;
        let matches = || {
            let mut r = conf.conditions(v6).apply(family_is(rule(chain), v6));
            if let Some(ip) = t.key.host_ip {
                r = r.daddr(host(ip));
            }
            r.dport(t.key.protocol.number(), t.key.host_port)
        };
        if conf.snat {
            if conf.masq_all {
                rules.push(matches().or_mark(mark));
            } else {
                // Connections from the host's loopback address and from the container
                // itself (hairpin) only get answers if their source is rewritten. IPv6
                // has no route_localnet: answers to ::1 never make it back, so there is
                // no loopback rule for it (as in the reference).
                if !v6 {
                    let loopback: IpNet = "127.0.0.0/8".parse().expect("valid");
                    rules.push(matches().saddr(loopback).or_mark(mark));
                }
                rules.push(matches().saddr(host(t.container_ip)).or_mark(mark));
            }
        }
        rules.push(matches().dnat(t.container_ip, Some(t.container_port)));
    }
    rules
}

/// The dispatch keys recorded in an attachment's chain (none if there is no such chain).
pub fn attached_keys(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
) -> Result<Vec<DispatchKey>, CniError> {
    let keys = nft_attach::attached_keys::<PortmapTable>(nft, network, who)?;
    Ok(keys.iter().filter_map(|k| DispatchKey::parse_key(k)).collect())
}

/// Why an attachment could not be added.
fn conflict(key: &DispatchKey) -> CniError {
    let address = key
        .host_ip
        .map(|ip| ip.to_string())
        .unwrap_or_else(|| if key.v6 { "[::]" } else { "0.0.0.0" }.into());
    CniError::internal(format!(
        "host port {address}:{}/{} is already mapped to another container",
        key.host_port, key.protocol
    ))
}

/// Adds (or replaces) the attachment's chain, rules and elements in one atomic batch,
/// after making sure its mark bit is masqueraded.
pub fn install(
    nft: &mut NftClient,
    network: &str,
    who: &Attachment,
    conf: &PortmapConf,
    targets: &[Target],
) -> Result<(), CniError> {
    if conf.snat {
        ensure_masq_bit(nft, conf.mark_masq_bit)?;
    }
    let mut keys: Vec<String> = Vec::new();
    for key in targets.iter().map(|t| t.key.key()) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    nft_attach::attach::<PortmapTable>(nft, network, who, &keys, |chain| {
        attachment_rules(conf, chain, targets)
    })
}

/// Removes the attachment's chain and the elements that lead to it. Missing pieces are
/// fine: DEL is idempotent.
pub fn detach(nft: &mut NftClient, network: &str, who: &Attachment) -> Result<(), CniError> {
    nft_attach::detach::<PortmapTable>(nft, network, who, None)
}

/// Removes the attachments of `network` not in `valid`; then, when no attachment of any
/// network is left, the whole table.
pub fn gc(nft: &mut NftClient, network: &str, valid: &[Attachment]) -> Result<(), GcErrors> {
    let mut errors = GcErrors::new();
    errors.merge(nft_attach::gc::<PortmapTable>(nft, network, valid));
    let table = format!("table {TABLE}");
    match nft.list_chains(FAMILY, TABLE).ignore_missing() {
        Err(e) => errors.push(table, nft_error("list chains", e)),
        Ok(None) => {}
        Ok(Some(chains))
            if chains.is_empty() || chains.iter().any(|c| c.name.starts_with(ATTACHMENT_PREFIX)) => {}
        Ok(Some(_)) => {
            let mut batch = Batch::new();
            batch.delete_table(FAMILY, TABLE);
            let deleted = nft.commit(&batch).ignore_missing();
            errors.record(table, deleted.map(drop).map_err(|e| nft_error("delete the empty table", e)));
        }
    }
    errors.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let keys = [
            DispatchKey { v6: false, protocol: Protocol::Tcp, host_port: 8080, host_ip: None },
            DispatchKey {
                v6: true,
                protocol: Protocol::Udp,
                host_port: 53,
                host_ip: Some("fd00::1".parse().unwrap()),
            },
            DispatchKey {
                v6: false,
                protocol: Protocol::Sctp,
                host_port: 9,
                host_ip: Some("10.0.0.1".parse().unwrap()),
            },
        ];
        for key in keys {
            assert_eq!(DispatchKey::parse_key(&key.key()), Some(key));
        }
        assert_eq!(DispatchKey::parse_key("hostport v4 tcp 8080 fd00::1"), None);
        assert_eq!(DispatchKey::parse_key("something else"), None);
    }

    #[test]
    fn snat_and_masq_all_decide_which_connections_are_marked() {
        let conf = |keys: serde_json::Value| PortmapConf::from_value(keys).unwrap();
        let targets = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            vec![Target {
                key: DispatchKey { v6: ip.is_ipv6(), protocol: Protocol::Tcp, host_port: 80, host_ip: None },
                container_ip: ip,
                container_port: 8080,
            }]
        };
        let count = |c: &PortmapConf, ip: &str| attachment_rules(c, "cni-x", &targets(ip)).len();
        let default = conf(serde_json::json!({}));
        assert_eq!(count(&default, "10.0.0.2"), 3, "localhost + hairpin marks, then DNAT");
        assert_eq!(count(&default, "fd00::2"), 2, "hairpin mark, then DNAT");
        assert_eq!(count(&conf(serde_json::json!({"masqAll": true})), "10.0.0.2"), 2);
        assert_eq!(count(&conf(serde_json::json!({"snat": false})), "10.0.0.2"), 1);
    }
}
