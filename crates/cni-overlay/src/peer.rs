//! Other nodes' records, as the agent is willing to believe them.
//!
//! Every record under the subnets prefix was written by some node, or by anyone who can
//! write to etcd (or sit on the path to a plaintext member): none is trusted. A record
//! becomes a [`PeerRecord`] only through [`PeerRecord::parse`], which checks everything the
//! data plane will program from it, so code holding a `PeerRecord` never checks again. A
//! record that fails is refused with a reason; [`Peers`] logs each refusal once per change
//! of the record and keeps the refused record's subnet out of the kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use cni_etcd::KeyValue;
use cni_net::MacAddr;
use ipnet::Ipv4Net;

use crate::config::Config;
use crate::dataplane::vtep_mac;
use crate::lease::{self, NodeRecord};

/// The largest record value read: a genuine one is about 80 bytes of JSON.
pub const MAX_RECORD_BYTES: usize = 1024;

/// The longest node name accepted (a DNS name's limit, as Kubernetes node names).
pub const MAX_NODE_NAME: usize = 253;

/// What this node is, against which peers are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Own {
    pub subnet: Ipv4Net,
    pub underlay: Ipv4Addr,
}

/// A peer the data plane may program: its subnet is one of the network's subnets of the
/// configured length and not this node's, its record is bound to a lease, and its underlay
/// address and VTEP MAC are ones a genuine agent would publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord {
    subnet: Ipv4Net,
    node: String,
    underlay: Ipv4Addr,
    vtep_mac: MacAddr,
}

impl PeerRecord {
    /// Checks one record (`key`, `value`, the etcd lease it is bound to); the error says
    /// which rule it broke.
    pub fn parse(
        config: &Config,
        own: &Own,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<PeerRecord, String> {
        let subnet = lease::key_subnet(config, key)?;
        if subnet.contains(&own.subnet.network()) || own.subnet.contains(&subnet.network()) {
            return Err(format!("subnet {subnet} overlaps this node's own {}", own.subnet));
        }
        if lease == 0 {
            // Every agent writes its record on a lease; one without would never expire.
            return Err("record is not bound to a lease".into());
        }
        if value.len() > MAX_RECORD_BYTES {
            return Err(format!("record of {} bytes is over the {MAX_RECORD_BYTES}-byte limit", value.len()));
        }
        let record: NodeRecord = serde_json::from_slice(value).map_err(|e| format!("record: {e}"))?;
        let node = checked_node(config, record.node)?;
        let underlay = checked_underlay(config, own, record.underlay)?;
        let vtep_mac = checked_vtep_mac(&record.vtep_mac, underlay)?;
        Ok(PeerRecord { subnet, node, underlay, vtep_mac })
    }

    pub fn subnet(&self) -> Ipv4Net {
        self.subnet
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn underlay(&self) -> Ipv4Addr {
        self.underlay
    }

    pub fn vtep_mac(&self) -> MacAddr {
        self.vtep_mac
    }
}

fn checked_node(config: &Config, node: String) -> Result<String, String> {
    if node.is_empty() || node.len() > MAX_NODE_NAME || node.chars().any(char::is_control) {
        return Err(format!("node name must be 1-{MAX_NODE_NAME} characters without control characters"));
    }
    if node == config.node {
        // This node's own record from an earlier lease (it expires with that lease), or
        // someone speaking for this node: never a peer either way.
        return Err(format!("record names this node ({node})"));
    }
    Ok(node)
}

/// An address VXLAN packets may be sent to: a unicast host address outside the pod
/// network, not this node's own; loopback only when this node's underlay is loopback too
/// (nodes sharing one host, as in a test).
fn checked_underlay(config: &Config, own: &Own, underlay: Ipv4Addr) -> Result<Ipv4Addr, String> {
    let refused = |why: &str| Err(format!("underlay {underlay} {why}"));
    if underlay.octets()[0] == 0 {
        return refused("is not a host address (0.0.0.0/8)");
    }
    if underlay.is_multicast() || underlay.is_broadcast() {
        return refused("is not unicast");
    }
    if underlay.octets()[0] >= 240 {
        return refused("is reserved (240.0.0.0/4)");
    }
    if underlay.is_loopback() && !own.underlay.is_loopback() {
        return refused("is loopback");
    }
    if underlay == own.underlay {
        return refused("is this node's own address");
    }
    if config.network.contains(&underlay) {
        return refused(&format!("lies inside the pod network {}", config.network));
    }
    Ok(underlay)
}

/// The VTEP MAC must be the one every agent derives from its underlay address: a record
/// cannot claim another node's MAC (and so take over its FDB entry).
fn checked_vtep_mac(text: &str, underlay: Ipv4Addr) -> Result<MacAddr, String> {
    let mac: MacAddr = text.parse().map_err(|_| format!("vtepMac {text:?} is not a MAC address"))?;
    if mac.octets()[0] & 1 != 0 || mac == MacAddr::default() {
        return Err(format!("vtepMac {mac} is not a unicast address"));
    }
    let derived = vtep_mac(underlay);
    if mac != derived {
        return Err(format!("vtepMac {mac} is not {derived}, the one derived from underlay {underlay}"));
    }
    Ok(mac)
}

/// The peers believed so far, and the records refused (by key, with the revision whose
/// refusal was logged, so a record is logged once per change and not on every resync).
#[derive(Debug, Default)]
pub struct Peers {
    accepted: BTreeMap<Ipv4Net, PeerRecord>,
    refused: BTreeMap<Vec<u8>, i64>,
}

/// What one record did to the set, for the agent's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Joined(PeerRecord),
    Left(PeerRecord),
    /// Refused, first time at this revision: log it.
    Refused {
        key: String,
        reason: String,
    },
    Unchanged,
}

impl Peers {
    pub fn accepted(&self) -> &BTreeMap<Ipv4Net, PeerRecord> {
        &self.accepted
    }

    /// Replaces everything with a full listing; returns the refusals not logged before.
    pub fn replace_all(&mut self, config: &Config, own: &Own, kvs: &[KeyValue]) -> Vec<Change> {
        let keys: BTreeSet<&[u8]> = kvs.iter().map(|kv| kv.key.as_slice()).collect();
        self.refused.retain(|key, _| keys.contains(key.as_slice()));
        self.accepted.clear();
        kvs.iter()
            .map(|kv| self.put(config, own, kv))
            .filter(|change| matches!(change, Change::Refused { .. }))
            .collect()
    }

    /// A record written (created or changed).
    pub fn put(&mut self, config: &Config, own: &Own, kv: &KeyValue) -> Change {
        if kv.key == lease::subnet_key(config, own.subnet) {
            return Change::Unchanged;
        }
        match PeerRecord::parse(config, own, &kv.key, &kv.value, kv.lease) {
            Ok(peer) => {
                self.refused.remove(&kv.key);
                match self.accepted.insert(peer.subnet, peer.clone()) {
                    Some(old) if old == peer => Change::Unchanged,
                    _ => Change::Joined(peer),
                }
            }
            Err(reason) => {
                // A peer whose record turned bad loses its entries.
                if let Ok(subnet) = lease::key_subnet(config, &kv.key) {
                    self.accepted.remove(&subnet);
                }
                match self.refused.insert(kv.key.clone(), kv.mod_revision) {
                    Some(logged) if logged == kv.mod_revision => Change::Unchanged,
                    _ => Change::Refused { key: kv.key_str(), reason },
                }
            }
        }
    }

    /// A record deleted (or its lease expired).
    pub fn delete(&mut self, config: &Config, key: &[u8]) -> Change {
        self.refused.remove(key);
        let Ok(subnet) = lease::key_subnet(config, key) else { return Change::Unchanged };
        match self.accepted.remove(&subnet) {
            Some(peer) => Change::Left(peer),
            None => Change::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &[&str]) -> Config {
        let args: Vec<String> = ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n1"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        Config::parse(&args).unwrap()
    }

    fn own() -> Own {
        Own { subnet: "10.244.1.0/24".parse().unwrap(), underlay: Ipv4Addr::new(192, 0, 2, 1) }
    }

    fn record(node: &str, underlay: &str) -> Vec<u8> {
        let mac = vtep_mac(underlay.parse().unwrap());
        format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}"}}"#).into_bytes()
    }

    fn parse(key: &str, value: &[u8]) -> Result<PeerRecord, String> {
        PeerRecord::parse(&config(&[]), &own(), key.as_bytes(), value, 7)
    }

    #[test]
    fn a_genuine_record_is_accepted() {
        let peer = parse("/cni-rs/overlay/subnets/10.244.2.0-24", &record("n2", "192.0.2.2")).unwrap();
        assert_eq!(peer.subnet(), "10.244.2.0/24".parse::<Ipv4Net>().unwrap());
        assert_eq!((peer.node(), peer.underlay()), ("n2", Ipv4Addr::new(192, 0, 2, 2)));
        assert_eq!(peer.vtep_mac().to_string(), "0a:58:c0:00:02:02");
    }

    #[test]
    fn hostile_subnets_are_refused_naming_the_rule() {
        let good = record("n2", "192.0.2.2");
        let cases = [
            ("0.0.0.0-0", "outside --network"),
            ("1.0.0.0-8", "outside --network"),
            ("128.0.0.0-1", "outside --network"),
            ("10.245.0.0-24", "outside --network"),
            ("10.244.0.0-16", "is a /16"),
            ("10.244.2.0-25", "is a /25"),
            ("10.244.2.5-24", "not a subnet's first address"),
            ("10.244.1.0-24", "overlaps this node's own"),
            ("10.244.2.0-24-1", "not a subnet key"),
            ("10.244.2.0-", "not a subnet key"),
            ("10.244.2.0-99", "not a subnet key"),
        ];
        for (key, want) in cases {
            let err = parse(&format!("/cni-rs/overlay/subnets/{key}"), &good).unwrap_err();
            assert!(err.contains(want), "{key}: {err}");
        }
        let err = PeerRecord::parse(&config(&[]), &own(), b"/cni-rs/overlay/subnets/10.244.2.0-24", &good, 0)
            .unwrap_err();
        assert!(err.contains("lease"), "{err}");
    }

    #[test]
    fn hostile_values_are_refused_naming_the_rule() {
        let key = "/cni-rs/overlay/subnets/10.244.2.0-24";
        let mac_for =
            |mac: &str| format!(r#"{{"node":"n2","underlay":"192.0.2.2","vtepMac":"{mac}"}}"#).into_bytes();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (record("n2", "0.0.0.0"), "0.0.0.0/8"),
            (record("n2", "224.0.0.1"), "not unicast"),
            (record("n2", "239.1.2.3"), "not unicast"),
            (record("n2", "255.255.255.255"), "not unicast"),
            (record("n2", "240.0.0.1"), "reserved"),
            (record("n2", "127.0.0.1"), "loopback"),
            (record("n2", "192.0.2.1"), "this node's own address"),
            (record("n2", "10.244.9.1"), "inside the pod network"),
            (record("n1", "192.0.2.2"), "names this node"),
            (record("", "192.0.2.2"), "node name"),
            (record("n\\u001b[2J", "192.0.2.2"), "node name"),
            (record(&"n".repeat(254), "192.0.2.2"), "node name"),
            (mac_for("01:00:5e:00:00:01"), "not a unicast"),
            (mac_for("00:00:00:00:00:00"), "not a unicast"),
            (mac_for("0a:58:c0:00:02:03"), "derived from underlay"),
            (mac_for("nope"), "not a MAC"),
            (b"{}".to_vec(), "record:"),
            (vec![b' '; MAX_RECORD_BYTES + 1], "over the 1024-byte limit"),
        ];
        for (value, want) in cases {
            let err = parse(key, &value).unwrap_err();
            assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
        }
    }

    #[test]
    fn loopback_peers_only_for_a_loopback_node() {
        let own = Own { subnet: "10.244.1.0/24".parse().unwrap(), underlay: Ipv4Addr::LOCALHOST };
        let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
        assert!(PeerRecord::parse(&config(&[]), &own, key, &record("n2", "127.0.0.2"), 7).is_ok());
    }

    #[test]
    fn peers_log_a_refusal_once_per_change_and_drop_a_peer_gone_bad() {
        let config = config(&[]);
        let own = own();
        let kv = |key: &str, value: Vec<u8>, revision: i64| KeyValue {
            key: format!("/cni-rs/overlay/subnets/{key}").into_bytes(),
            value,
            create_revision: 1,
            mod_revision: revision,
            lease: 7,
        };
        let mut peers = Peers::default();
        let good = kv("10.244.2.0-24", record("n2", "192.0.2.2"), 2);
        let bad = kv("1.0.0.0-8", record("evil", "192.0.2.9"), 3);
        let refused = peers.replace_all(&config, &own, &[good.clone(), bad.clone()]);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(peers.accepted().len(), 1);
        // Listed again unchanged: nothing new to log.
        assert!(peers.replace_all(&config, &own, &[good.clone(), bad.clone()]).is_empty());
        assert_eq!(peers.put(&config, &own, &bad), Change::Unchanged);
        // Changed: logged again.
        assert!(matches!(
            peers.put(&config, &own, &kv("1.0.0.0-8", b"{}".to_vec(), 4)),
            Change::Refused { .. }
        ));
        // The good peer's record replaced by a bad one: it leaves the set.
        let turned = kv("10.244.2.0-24", record("n2", "224.0.0.1"), 5);
        assert!(matches!(peers.put(&config, &own, &turned), Change::Refused { .. }));
        assert!(peers.accepted().is_empty());
        assert!(matches!(peers.put(&config, &own, &good), Change::Joined(_)));
        assert!(matches!(peers.delete(&config, &good.key), Change::Left(_)));
        // This node's own record is neither a peer nor a refusal.
        let mine = kv("10.244.1.0-24", record("n1", "192.0.2.1"), 6);
        assert_eq!(peers.put(&config, &own, &mine), Change::Unchanged);
    }
}
