//! The node's subnet lease in etcd: `<prefix>/subnets/<a.b.c.d-len>` holds the node's
//! record and is bound to an etcd lease with a TTL. Claiming is a create-if-absent
//! transaction, so two nodes can never hold one subnet; a node that stops renewing loses
//! its record when etcd's clock says the TTL is over, and its peers see the deletion.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_etcd::{Client, Compare, KeyValue, Op, Txn};
use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::peer::{Refusal, Rule};
use crate::{Error, Result};

/// What a node publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    pub node: String,
    /// The underlay address other nodes send this node's VXLAN packets to (or, with
    /// direct routing, route its pod subnets via); IPv4 or IPv6, the underlay's family.
    pub underlay: IpAddr,
    /// The MAC of the node's VXLAN device.
    pub vtep_mac: String,
    /// The node's IPv6 pod subnet (dual-stack only; absent in IPv4-only clusters, so
    /// their records are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet6: Option<Ipv6Net>,
    /// The node's WireGuard public key, base64 (`--backend wireguard` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wg_public_key: Option<String>,
    /// The UDP port its WireGuard device listens on, at `underlay` (`--backend wireguard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wg_port: Option<u16>,
}

/// The IPv6 subnet that goes with an IPv4 subnet: the n-th /`--subnet-len6` of
/// `--network6` for the n-th /`--subnet-len` of `--network`. Holding the IPv4 subnet's key
/// is holding its IPv6 subnet too, so the one create-if-absent transaction leases both,
/// and a peer's claimed IPv6 subnet can be checked against the key it sits under.
pub fn paired_subnet6(config: &Config, subnet: Ipv4Net) -> Option<Ipv6Net> {
    let network6 = config.network6?;
    let index =
        (u32::from(subnet.network()) - u32::from(config.network.network())) >> (32 - config.subnet_len);
    // Config::validate made sure the IPv6 network has at least as many subnets.
    let offset = u128::from(index) << (128 - u32::from(config.subnet_len6));
    let base = u128::from(network6.network());
    Some(Ipv6Net::new(Ipv6Addr::from(base + offset), config.subnet_len6).expect("valid prefix length"))
}

/// A subnet this agent holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetLease {
    pub subnet: Ipv4Net,
    pub lease_id: i64,
}

/// `10.244.3.0/24` → `10.244.3.0-24` (a key without a second slash).
pub fn subnet_key(config: &Config, subnet: Ipv4Net) -> Vec<u8> {
    format!("{}{}-{}", config.subnets_prefix(), subnet.network(), subnet.prefix_len()).into_bytes()
}

/// The subnet a record's key names, if it is one this network can have: the canonical
/// `a.b.c.d-len` of a subnet of `--network` with exactly `--subnet-len`. Anything else
/// (`0.0.0.0-0`, `1.0.0.0-8`, another network's, host bits set) is refused with the reason:
/// keys are written by other nodes and nothing in them is trusted.
pub fn key_subnet(config: &Config, key: &[u8]) -> std::result::Result<Ipv4Net, Refusal> {
    let prefix = config.subnets_prefix();
    let not_ours = || {
        Rule::Key.refuse(format!(
            "key {:?} is not a subnet key (a.b.c.d-len under {prefix})",
            String::from_utf8_lossy(key)
        ))
    };
    let text = std::str::from_utf8(key).map_err(|_| not_ours())?;
    let (addr, len) =
        text.strip_prefix(&prefix).and_then(|rest| rest.split_once('-')).ok_or_else(not_ours)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| not_ours())?;
    let len: u8 = len.parse().map_err(|_| not_ours())?;
    let subnet = Ipv4Net::new(addr, len).map_err(|_| not_ours())?;
    if subnet.network() != addr {
        return Err(Rule::Subnet.refuse(format!("{subnet} is not a subnet's first address")));
    }
    if !config.network.contains(&subnet) {
        return Err(Rule::Subnet.refuse(format!("subnet {subnet} lies outside --network {}", config.network)));
    }
    if len != config.subnet_len {
        return Err(Rule::Subnet
            .refuse(format!("subnet {subnet} is a /{len}, not the network's /{}", config.subnet_len)));
    }
    Ok(subnet)
}

/// Every record under the prefix and the store's revision of that read; the caller decides
/// which it believes ([`crate::peer::Peers`]).
pub fn list(client: &mut Client, config: &Config) -> Result<(Vec<KeyValue>, i64)> {
    Ok(client.get_prefix(config.subnets_prefix().as_bytes(), false)?)
}

/// A record whose key is one of the network's subnets, with its parsed value and lease
/// (for this node's own record and for knowing which subnets are taken).
fn parse(config: &Config, kv: &KeyValue) -> Option<(Ipv4Net, NodeRecord, i64)> {
    let subnet = key_subnet(config, &kv.key).ok()?;
    let record = serde_json::from_slice(&kv.value).ok()?;
    Some((subnet, record, kv.lease))
}

/// FNV-1a (64 bits): a small, fixed hash for values every node must derive alike (where a
/// node starts looking for a subnet, an IPv6 node's VTEP MAC). Not for secrets.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The node's subnets in the network, starting at a place derived from the node's name so
/// that nodes starting together rarely try the same one.
fn candidates(config: &Config) -> impl Iterator<Item = Ipv4Net> + '_ {
    let count = 1u64 << (config.subnet_len - config.network.prefix_len());
    let start = fnv1a64(config.node.as_bytes()) % count;
    let base = u32::from(config.network.network());
    let size = 1u64 << (32 - config.subnet_len);
    (0..count).map(move |i| {
        let n = (start + i) % count;
        Ipv4Net::new(Ipv4Addr::from(base + (n * size) as u32), config.subnet_len)
            .expect("valid prefix length")
    })
}

/// Takes the node's subnet: its own record if it is still alive (a restarted agent keeps
/// its subnet and lease), else `preferred` (the subnet it had before) if free, else the
/// first free one. The record is (re)written with `record`'s current contents and the IPv6
/// subnet paired with the one taken.
pub fn acquire(
    client: &mut Client,
    config: &Config,
    record: &NodeRecord,
    preferred: Option<Ipv4Net>,
) -> Result<SubnetLease> {
    let value = |subnet: Ipv4Net| {
        let record = NodeRecord { subnet6: paired_subnet6(config, subnet), ..record.clone() };
        serde_json::to_vec(&record).expect("a record serialises")
    };
    let (kvs, _) = client.get_prefix(config.subnets_prefix().as_bytes(), false)?;
    let parsed: Vec<(Ipv4Net, NodeRecord, i64)> = kvs.iter().filter_map(|kv| parse(config, kv)).collect();
    if let Some((subnet, _, lease_id)) = parsed.iter().find(|(_, r, _)| r.node == config.node) {
        if *lease_id != 0 && client.lease_keepalive(*lease_id)? > 0 {
            let key = subnet_key(config, *subnet);
            // Same lease, same key: only the contents (a new underlay address) may change.
            let txn = Txn {
                compare: vec![Compare::CreateRevision(key.clone(), kvs_create_revision(&kvs, &key))],
                success: vec![Op::Put { key, value: value(*subnet), lease: *lease_id }],
                failure: vec![],
            };
            if client.txn(&txn)?.succeeded {
                return Ok(SubnetLease { subnet: *subnet, lease_id: *lease_id });
            }
        }
    }
    let taken: Vec<Ipv4Net> = parsed.iter().map(|(s, _, _)| *s).collect();
    let lease_id = client.lease_grant(config.ttl)?;
    let order = preferred.filter(|p| config.network.contains(p) && p.prefix_len() == config.subnet_len);
    for subnet in order.into_iter().chain(candidates(config)) {
        if taken.contains(&subnet) {
            continue;
        }
        let key = subnet_key(config, subnet);
        let txn = Txn {
            compare: vec![Compare::CreateRevision(key.clone(), 0)],
            success: vec![Op::Put { key, value: value(subnet), lease: lease_id }],
            failure: vec![],
        };
        if client.txn(&txn)?.succeeded {
            return Ok(SubnetLease { subnet, lease_id });
        }
    }
    let _ = client.lease_revoke(lease_id);
    Err(Error::Exhausted(format!("no free /{} left in {}", config.subnet_len, config.network)))
}

fn kvs_create_revision(kvs: &[KeyValue], key: &[u8]) -> i64 {
    kvs.iter().find(|kv| kv.key == key).map(|kv| kv.create_revision).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(network: &str, len: u8) -> Config {
        let args: Vec<String> =
            ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n1", "--network", network]
                .iter()
                .map(|s| s.to_string())
                .chain(["--subnet-len".to_string(), len.to_string()])
                .collect();
        Config::parse(&args).unwrap()
    }

    #[test]
    fn keys_round_trip() {
        let c = config("10.244.0.0/16", 24);
        let subnet: Ipv4Net = "10.244.7.0/24".parse().unwrap();
        let key = subnet_key(&c, subnet);
        assert_eq!(key, b"/cni-rs/overlay/subnets/10.244.7.0-24");
        assert_eq!(key_subnet(&c, &key), Ok(subnet));
        assert!(key_subnet(&c, b"/other/10.244.7.0-24").unwrap_err().message.contains("not a subnet key"));
    }

    #[test]
    fn ipv6_subnets_pair_one_to_one() {
        let mut c = config("10.244.0.0/16", 24);
        assert_eq!(paired_subnet6(&c, "10.244.7.0/24".parse().unwrap()), None);
        c.network6 = Some("fd00:244::/48".parse().unwrap());
        let pair = |c: &Config, s: &str| paired_subnet6(c, s.parse().unwrap()).unwrap().to_string();
        assert_eq!(pair(&c, "10.244.0.0/24"), "fd00:244::/64");
        assert_eq!(pair(&c, "10.244.7.0/24"), "fd00:244:0:7::/64");
        assert_eq!(pair(&c, "10.244.255.0/24"), "fd00:244:0:ff::/64");
        c.subnet_len6 = 120;
        c.network6 = Some("fd00::/104".parse().unwrap());
        assert_eq!(pair(&c, "10.244.1.0/24"), "fd00::100/120");
    }

    #[test]
    fn ipv4_records_read_as_before() {
        let old = br#"{"node":"n2","underlay":"192.0.2.2","vtepMac":"0a:58:c0:00:02:02"}"#;
        let record: NodeRecord = serde_json::from_slice(old).unwrap();
        assert_eq!((record.underlay, record.subnet6), ("192.0.2.2".parse().unwrap(), None));
        assert_eq!(serde_json::to_vec(&record).unwrap(), old.to_vec(), "no new key in an IPv4 record");
    }

    #[test]
    fn candidates_cover_the_network_once() {
        let c = config("10.0.0.0/22", 24);
        let mut all: Vec<Ipv4Net> = candidates(&c).collect();
        all.sort();
        let want: Vec<Ipv4Net> = ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(all, want);
    }
}
