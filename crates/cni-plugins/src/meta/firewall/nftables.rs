//! The nftables backend: our own tables, programmed over netlink, no process spawned.
//!
//! ```text
//! table inet cni_firewall {
//!   map ctr4 { type ipv4_addr : verdict }     # container IP -> jump cni-<hash>
//!   map ctr6 { type ipv6_addr : verdict }
//!   map isolation { type ifname : verdict }   # policed bridge -> jump iso-<bridge>
//!   set isolated_bridges { type ifname }      # bridges with a non-open ingressPolicy
//!   chain forward { type filter hook forward priority filter; policy accept;
//!     oifname vmap @isolation                 # first, like the reference's STAGE-1 jump
//!     ip daddr vmap @ctr4
//!     ip saddr vmap @ctr4
//!     ip6 daddr vmap @ctr6
//!     ip6 saddr vmap @ctr6 }
//!   chain cni-<hash> {                        # one per attachment (network, id, ifname)
//!     ip daddr 10.88.0.5 ct state established,related accept
//!     ip saddr 10.88.0.5 accept comment "ip=10.88.0.5"
//!     counter comment "port=veth1234"         # isolated only: records the bridge port
//!   }
//!   chain iso-<bridge> {                      # one per policed bridge, never removed
//!     iifname "<bridge>" return
//!     iifname @isolated_bridges drop }
//! }
//! table bridge cni_firewall {                 # only once an `isolated` ADD happened
//!   set isolated_ports { type ifname }        # host ends of isolated containers' veths
//!   chain forward { type filter hook forward priority -200; policy accept;
//!     iifname @isolated_ports drop
//!     oifname @isolated_ports drop }
//! }
//! ```
//!
//! An attachment's state is its chain plus one map element per address (and its port in
//! `isolated_ports`): ADD and DEL are one batch each whatever the number of containers.
//!
//! Why the accepts alone cannot open a host: in nftables a packet must be accepted by
//! *every* base chain on the hook; an `accept` here ends only this table's evaluation, so
//! a `drop` policy in another table (e.g. iptables-nft's `ip filter FORWARD`) still drops.
//! The plugin's [`super::admission`] puts the attachment's accepts into that very chain.

use std::net::IpAddr;

use cni_net::nft::{
    ct_state, priority, Batch, Chain, ChainPolicy, ChainType, Family, Field, Hook, KeyType, KeyValue,
    ListedRule, MapData, NftClient, NftError, RuleBuilder, Set, SetElement, SetRef, Table, Verdict,
};
use cni_net::Idempotent;
use cni_sdk::{CniError, ErrorCode, Request};

use super::config::IngressPolicy;
use super::target::Target;
use crate::common::nft_attach::{self, DispatchTable};
use cni_sdk::Attachment;

pub const TABLE: &str = "cni_firewall";
const FORWARD: &str = "forward";
const CTR4: &str = "ctr4";
const CTR6: &str = "ctr6";
const ISOLATION: &str = "isolation";
const ISOLATED_BRIDGES: &str = "isolated_bridges";
const ISOLATED_PORTS: &str = "isolated_ports";
/// Comment prefixes of the attachment's own rules: what DEL without prevResult reads back.
const IP_TAG: &str = "ip=";
const PORT_TAG: &str = "port=";

/// The `inet cni_firewall` table as an [`nft_attach`] dispatch table.
pub struct FirewallTable;

fn rule(builder: RuleBuilder) -> cni_net::nft::Rule {
    builder.build().expect("the firewall's static rules are valid")
}

impl DispatchTable for FirewallTable {
    const FAMILY: Family = Family::Inet;
    const TABLE: &'static str = TABLE;

    fn bootstrap(batch: &mut Batch) {
        let map =
            |name: &str, key: KeyType| Set::named(Family::Inet, TABLE, name, &[key]).map_to(MapData::Verdict);
        let ctr4 = batch.add_set(&map(CTR4, KeyType::Ipv4Addr));
        let ctr6 = batch.add_set(&map(CTR6, KeyType::Ipv6Addr));
        let isolation = batch.add_set(&map(ISOLATION, KeyType::IfName));
        batch.add_set(&Set::named(Family::Inet, TABLE, ISOLATED_BRIDGES, &[KeyType::IfName]));
        batch.add_chain(
            &Chain::base(Family::Inet, TABLE, FORWARD, ChainType::Filter, Hook::Forward, priority::FILTER)
                .with_policy(ChainPolicy::Accept),
        );
        let base = || RuleBuilder::new(Family::Inet, TABLE, FORWARD);
        batch.add_rule(&rule(base().load_key(&[Field::OifName]).vmap(&isolation)));
        batch.add_rule(&rule(base().load_key(&[Field::IpDaddr]).vmap(&ctr4)));
        batch.add_rule(&rule(base().load_key(&[Field::IpSaddr]).vmap(&ctr4)));
        batch.add_rule(&rule(base().load_key(&[Field::Ip6Daddr]).vmap(&ctr6)));
        batch.add_rule(&rule(base().load_key(&[Field::Ip6Saddr]).vmap(&ctr6)));
    }

    /// An address key dispatches to the attachment's chain; any other key is a bridge port
    /// of an `isolated` container.
    fn elements(key: &str, chain: &str) -> Result<Vec<(SetRef, SetElement)>, CniError> {
        let element = match key.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => (
                SetRef::named(Family::Inet, TABLE, CTR4),
                SetElement::new(&[KeyValue::Ipv4(a)]).with_verdict(Verdict::Jump(chain.to_string())),
            ),
            Ok(IpAddr::V6(a)) => (
                SetRef::named(Family::Inet, TABLE, CTR6),
                SetElement::new(&[KeyValue::Ipv6(a)]).with_verdict(Verdict::Jump(chain.to_string())),
            ),
            Err(_) => (
                SetRef::named(Family::Bridge, TABLE, ISOLATED_PORTS),
                SetElement::new(&[KeyValue::IfName(key.to_string())]),
            ),
        };
        Ok(vec![element])
    }
}

fn nft_error(what: &str, e: NftError) -> CniError {
    CniError::internal(format!("nftables: {what}: {e}"))
}

pub fn client() -> Result<nft_attach::Client, CniError> {
    NftClient::new()
        .map(nft_attach::Client::from)
        .map_err(|e| CniError::new(ErrorCode::NotAvailable, format!("nftables unavailable: {e}")))
}

/// Creates `bridge cni_firewall` once (same race rule as the inet table: EEXIST is fine).
fn ensure_bridge_table(nft: &mut NftClient) -> Result<(), CniError> {
    if nft.get_table(Family::Bridge, TABLE).map_err(|e| nft_error("look up bridge table", e))?.is_some() {
        return Ok(());
    }
    let mut batch = Batch::new();
    batch.create_table(&Table::new(Family::Bridge, TABLE));
    let ports = batch.add_set(&Set::named(Family::Bridge, TABLE, ISOLATED_PORTS, &[KeyType::IfName]));
    batch.add_chain(
        &Chain::base(
            Family::Bridge,
            TABLE,
            FORWARD,
            ChainType::Filter,
            Hook::Forward,
            priority::BRIDGE_FILTER,
        )
        .with_policy(ChainPolicy::Accept),
    );
    let base = || RuleBuilder::new(Family::Bridge, TABLE, FORWARD);
    batch.add_rule(&rule(base().load_key(&[Field::IifName]).in_set(&ports).drop()));
    batch.add_rule(&rule(base().load_key(&[Field::OifName]).in_set(&ports).drop()));
    nft.commit(&batch).ignore_exists().map(drop).map_err(|e| nft_error("create bridge table", e))
}

fn isolation_chain(bridge: &str) -> String {
    format!("iso-{bridge}")
}

/// Puts `bridge` under isolation: created once, exclusively, so concurrent ADDs on the
/// same bridge never stack rules. Like the reference, it stays after the last DEL (other
/// containers may still be on the bridge).
fn ensure_bridge_isolation(nft: &mut NftClient, bridge: &str) -> Result<(), CniError> {
    let chain = isolation_chain(bridge);
    // The usual case, the bridge is already isolated: one cheap read instead of a batch
    // that the kernel would refuse (a refused batch costs as much as a commit).
    let listed = nft.list_rules(Family::Inet, TABLE, &chain).ignore_missing();
    if listed.map_err(|e| nft_error("list the bridge's isolation chain", e))?.is_some_and(|r| !r.is_empty()) {
        return Ok(());
    }
    let mut batch = Batch::new();
    batch.create_chain(&Chain::regular(Family::Inet, TABLE, chain.clone()));
    let iso = || RuleBuilder::new(Family::Inet, TABLE, chain.clone());
    let build = |b: RuleBuilder| b.build().map_err(|e| nft_error("build isolation rule", e));
    batch.add_rule(&build(iso().iifname(bridge).ret())?);
    let bridges = SetRef::named(Family::Inet, TABLE, ISOLATED_BRIDGES);
    batch.add_rule(&build(iso().load_key(&[Field::IifName]).in_set(&bridges).drop())?);
    batch.add_elements(&bridges, &[SetElement::new(&[KeyValue::IfName(bridge.to_string())])]);
    batch.add_elements(
        &SetRef::named(Family::Inet, TABLE, ISOLATION),
        &[SetElement::new(&[KeyValue::IfName(bridge.to_string())])
            .with_verdict(Verdict::Jump(chain.clone()))],
    );
    nft.commit(&batch)
        .ignore_exists()
        .map(drop)
        .map_err(|e| nft_error(&format!("isolate bridge {bridge}"), e))
}

/// The per-attachment rules: accept replies to and everything from each address.
fn attachment_rules(chain: &str, target: &Target, port: Option<&str>) -> Vec<RuleBuilder> {
    let mut rules = Vec::new();
    if target.ips.is_empty() {
        // The first rule's comment is the attachment's summary (see nft_attach): keep it
        // off the port rule, whose own comment DEL reads.
        rules.push(RuleBuilder::new(Family::Inet, TABLE, chain).counter());
    }
    for ip in &target.ips {
        let host = ipnet::IpNet::from(*ip);
        let base = || RuleBuilder::new(Family::Inet, TABLE, chain);
        rules.push(base().daddr(host).ct_state(ct_state::ESTABLISHED | ct_state::RELATED).accept());
        rules.push(base().saddr(host).accept().comment(format!("{IP_TAG}{ip}")));
    }
    if let Some(port) = port {
        rules.push(
            RuleBuilder::new(Family::Inet, TABLE, chain).counter().comment(format!("{PORT_TAG}{port}")),
        );
    }
    rules
}

fn keys(target: &Target, port: Option<&str>) -> Vec<String> {
    target.ips.iter().map(IpAddr::to_string).chain(port.map(str::to_string)).collect()
}

pub fn add(
    nft: &mut NftClient,
    req: &Request,
    policy: IngressPolicy,
    target: &Target,
) -> Result<(), CniError> {
    nft_attach::ensure_table::<FirewallTable>(nft)?;
    let port = match policy {
        IngressPolicy::Open => None,
        IngressPolicy::SameBridge => {
            ensure_bridge_isolation(nft, target.require_bridge(policy)?)?;
            None
        }
        IngressPolicy::Isolated => {
            let port = target.require_host_port()?;
            ensure_bridge_isolation(nft, target.require_bridge(policy)?)?;
            ensure_bridge_table(nft)?;
            Some(port)
        }
    };
    let (network, who) = (req.conf.name.as_str(), req.attachment());
    // A retried ADD first removes what the earlier one recorded, by its full key list
    // (attach's own cleanup only knows the possibly truncated summary comment).
    let earlier = recorded_keys(nft, network, &who)?;
    if !earlier.is_empty() {
        nft_attach::detach::<FirewallTable>(nft, network, &who, Some(&earlier))?;
    }
    if !has_attachment(policy, target) {
        return Ok(()); // nothing to accept, nothing to isolate
    }
    nft_attach::attach::<FirewallTable>(nft, network, &who, &keys(target, port), |chain| {
        attachment_rules(chain, target, port)
    })
}

/// Whether ADD makes an attachment chain: not for a result without addresses (podman's
/// `--ipam-driver none`) unless `isolated` has the bridge port to cut off. ADD and CHECK
/// must agree on it, or CHECK right after a successful ADD fails.
fn has_attachment(policy: IngressPolicy, target: &Target) -> bool {
    !target.ips.is_empty() || policy == IngressPolicy::Isolated
}

/// The keys ADD recorded in the attachment's own rule comments (complete even when the
/// first rule's summary comment had to be truncated).
fn recorded_keys(nft: &mut NftClient, network: &str, who: &Attachment) -> Result<Vec<String>, CniError> {
    let rules = nft.list_rules(Family::Inet, TABLE, &nft_attach::chain_name(network, who)).ignore_missing();
    Ok(tagged_keys(&rules.map_err(|e| nft_error("list the attachment's chain", e))?.unwrap_or_default()))
}

/// The `ip=` / `port=` tags of an attachment chain's rules.
fn tagged_keys(rules: &[ListedRule]) -> Vec<String> {
    rules
        .iter()
        .filter_map(|r| r.rule.comment.as_deref())
        .filter_map(|c| c.strip_prefix(IP_TAG).or_else(|| c.strip_prefix(PORT_TAG)))
        .map(str::to_string)
        .collect()
}

/// Removes the attachment's chain and elements: the keys come from prevResult when there
/// is one and from the chain's own rules in any case (one chain is read, not the table).
pub fn del(nft: &mut NftClient, req: &Request, target: Option<&Target>) -> Result<(), CniError> {
    let (network, who) = (req.conf.name.as_str(), req.attachment());
    let mut keys = recorded_keys(nft, network, &who)?;
    if keys.is_empty() {
        // ADD always puts at least one tagged rule into the chain, in the same batch as
        // the map elements: no tagged rule means no chain and no elements (already
        // deleted, or never added) — nothing to do, without a failing batch.
        return Ok(());
    }
    if let Some(target) = target {
        for key in self::keys(target, target.host_port.as_deref()) {
            // A prevResult port is only ours if ADD recorded it (isolated policy).
            let is_ip = key.parse::<IpAddr>().is_ok();
            if is_ip && !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    nft_attach::detach::<FirewallTable>(nft, network, &who, Some(&keys))
}

/// Verifies the attachment's chain holds a rule for every address (and the port for
/// `isolated`), and that the bridge is still under isolation for non-open policies.
pub fn check(req: &Request, policy: IngressPolicy, target: &Target) -> Result<(), CniError> {
    let mut nft = client()?;
    let (network, who) = (req.conf.name.as_str(), req.attachment());
    if has_attachment(policy, target) && !nft_attach::is_attached::<FirewallTable>(&mut nft, network, &who)? {
        return Err(CniError::internal(format!(
            "firewall rules for container {} ({}) are missing from table inet {TABLE}",
            req.container_id, req.ifname
        )));
    }
    let recorded = recorded_keys(&mut nft, network, &who)?;
    for ip in &target.ips {
        if !recorded.contains(&ip.to_string()) {
            return Err(CniError::internal(format!("firewall rules for {ip} are missing")));
        }
    }
    if policy != IngressPolicy::Open {
        let bridge = target.require_bridge(policy)?;
        let rules = nft
            .list_rules(Family::Inet, TABLE, &isolation_chain(bridge))
            .ignore_missing()
            .map_err(|e| nft_error("list the bridge's isolation chain", e))?
            .unwrap_or_default();
        if rules.is_empty() {
            return Err(CniError::internal(format!("isolation rules for bridge {bridge} are missing")));
        }
    }
    if policy == IngressPolicy::Isolated {
        let port = target.require_host_port()?;
        if !recorded.iter().any(|k| k == port) {
            return Err(CniError::internal(format!("isolation of bridge port {port} is missing")));
        }
    }
    Ok(())
}

/// Removes the attachments of this network that the runtime no longer lists. GC is the
/// one operation that reads the whole table; each stale attachment is removed with the
/// full key list from its own rules.
pub fn gc(req: &Request) -> Result<(), CniError> {
    Ok(nft_attach::gc::<FirewallTable>(&mut *client()?, &req.conf.name, &req.valid_attachments()?)?)
}

/// Ready when nf_tables answers in this namespace.
pub fn status() -> Result<(), CniError> {
    let mut nft = client()?;
    nft.get_table(Family::Inet, TABLE)
        .map(drop)
        .map_err(|e| CniError::new(ErrorCode::NotAvailable, format!("nftables unavailable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_the_attachment_chain_and_names_to_the_port_set() {
        let v4 = FirewallTable::elements("10.88.0.5", "cni-1").unwrap();
        assert_eq!(v4[0].0.name, CTR4);
        assert_eq!(v4[0].1.data, Some(cni_net::nft::ElementData::Verdict(Verdict::Jump("cni-1".into()))));
        assert_eq!(FirewallTable::elements("fd00::5", "cni-1").unwrap()[0].0.name, CTR6);
        let port = FirewallTable::elements("veth1234", "cni-1").unwrap();
        assert_eq!((port[0].0.family, port[0].0.name.as_str()), (Family::Bridge, ISOLATED_PORTS));
        assert_eq!(port[0].1.data, None);
    }

    #[test]
    fn every_address_gets_a_tagged_rule() {
        let target = Target {
            ips: vec!["10.88.0.5".parse().unwrap(), "fd00::5".parse().unwrap()],
            bridge: Some("cni0".into()),
            host_port: Some("veth1".into()),
        };
        let rules: Vec<_> = attachment_rules("cni-1", &target, Some("veth1"))
            .into_iter()
            .map(|r| r.build().unwrap())
            .collect();
        let comments: Vec<_> = rules.iter().filter_map(|r| r.comment.clone()).collect();
        assert_eq!(comments, ["ip=10.88.0.5", "ip=fd00::5", "port=veth1"]);
        assert_eq!(rules.len(), 5);
        assert_eq!(keys(&target, Some("veth1")), ["10.88.0.5", "fd00::5", "veth1"]);
    }
}
