//! Other nodes' records, as the agent is willing to believe them.
//!
//! Every record under the subnets prefix was written by some node, or by anyone who can
//! write to etcd (or sit on the path to a plaintext member): none is trusted. A record
//! becomes a [`PeerRecord`] only through [`PeerRecord::parse`], which checks everything the
//! data plane will program from it, so code holding a `PeerRecord` never checks again. A
//! record that fails is refused with a reason; [`Peers`] logs each refusal once per change
//! of the record and keeps the refused record's subnet out of the kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_etcd::KeyValue;
use cni_net::wireguard::{self, Key};
use cni_net::MacAddr;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::config::{Backend, Config};
use crate::dataplane::vtep_mac;
use crate::lease::{self, paired_subnet6, NodeRecord};

mod refusal;
pub use refusal::{Refusal, Rule};

/// The largest record value read: a genuine dual-stack one is about 130 bytes of JSON.
pub const MAX_RECORD_BYTES: usize = 1024;

/// The longest node name accepted (a DNS name's limit, as Kubernetes node names).
pub const MAX_NODE_NAME: usize = 253;

/// What this node is, against which peers are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Own {
    pub subnet: Ipv4Net,
    /// The IPv6 subnet paired with `subnet` (dual-stack only).
    pub subnet6: Option<Ipv6Net>,
    pub underlay: IpAddr,
    /// The connected prefixes of the underlay interface (of the underlay's family): a peer
    /// whose underlay address lies in one shares this node's L2 and can be routed directly.
    pub onlink: Vec<IpNet>,
    /// This node's WireGuard public key (`--backend wireguard`): no peer may claim it.
    pub wg_public_key: Option<Key>,
}

impl Own {
    fn is_onlink(&self, address: IpAddr) -> bool {
        self.onlink.iter().any(|prefix| prefix.contains(&address))
    }
}

/// How the data plane reaches a peer's pod subnets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerPath {
    /// A route via the peer's underlay address on the underlay interface (its subnets of
    /// the underlay's family; the other family, if any, still goes over VXLAN).
    Direct,
    /// Route, permanent neighbour and FDB entry on the VXLAN device.
    Vxlan,
    /// A route on the WireGuard device, and the peer on it (its key, endpoint and pod
    /// subnets as allowed IPs).
    Wireguard,
}

/// How a peer is reached over WireGuard: its public key, and its listen port at its
/// underlay address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgIdentity {
    pub public_key: Key,
    pub port: u16,
}

impl std::fmt::Display for PeerPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerPath::Direct => "direct",
            PeerPath::Vxlan => "vxlan",
            PeerPath::Wireguard => "wireguard",
        })
    }
}

/// A peer the data plane may program: its subnet is one of the network's subnets of the
/// configured length and not this node's, its record is bound to a lease, and its underlay
/// address and VTEP MAC are ones a genuine agent would publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord {
    subnet: Ipv4Net,
    subnet6: Option<Ipv6Net>,
    node: String,
    underlay: IpAddr,
    vtep_mac: MacAddr,
    path: PeerPath,
    /// Set exactly when the path is [`PeerPath::Wireguard`].
    wireguard: Option<WgIdentity>,
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
    ) -> Result<PeerRecord, Refusal> {
        let subnet = lease::key_subnet(config, key)?;
        if subnet.contains(&own.subnet.network()) || own.subnet.contains(&subnet.network()) {
            return Err(
                Rule::Subnet.refuse(format!("subnet {subnet} overlaps this node's own {}", own.subnet))
            );
        }
        if lease == 0 {
            // Every agent writes its record on a lease; one without would never expire.
            return Err(Rule::NoLease.refuse("record is not bound to a lease"));
        }
        if value.len() > MAX_RECORD_BYTES {
            return Err(Rule::TooLarge.refuse(format!(
                "record of {} bytes is over the {MAX_RECORD_BYTES}-byte limit",
                value.len()
            )));
        }
        let record: NodeRecord =
            serde_json::from_slice(value).map_err(|e| Rule::Malformed.refuse(format!("record: {e}")))?;
        let node = checked_node(config, record.node)?;
        let subnet6 = checked_subnet6(config, subnet, record.subnet6)?;
        let underlay = checked_underlay(config, own, record.underlay)?;
        let vtep_mac = checked_vtep_mac(&record.vtep_mac, underlay)?;
        let path = checked_path(config, own, underlay)?;
        let wireguard = match path {
            PeerPath::Wireguard => Some(checked_wireguard(own, &record.wg_public_key, record.wg_port)?),
            _ => None,
        };
        Ok(PeerRecord { subnet, subnet6, node, underlay, vtep_mac, path, wireguard })
    }

    pub fn subnet(&self) -> Ipv4Net {
        self.subnet
    }

    /// The peer's IPv6 subnet, when this node is dual-stack and the peer has one.
    pub fn subnet6(&self) -> Option<Ipv6Net> {
        self.subnet6
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn underlay(&self) -> IpAddr {
        self.underlay
    }

    pub fn vtep_mac(&self) -> MacAddr {
        self.vtep_mac
    }

    pub fn path(&self) -> PeerPath {
        self.path
    }

    /// Its WireGuard key and port (with `--backend wireguard`).
    pub fn wireguard(&self) -> Option<WgIdentity> {
        self.wireguard
    }
}

fn checked_node(config: &Config, node: String) -> Result<String, Refusal> {
    if node.is_empty() || node.len() > MAX_NODE_NAME || node.chars().any(char::is_control) {
        return Err(Rule::NodeName
            .refuse(format!("node name must be 1-{MAX_NODE_NAME} characters without control characters")));
    }
    if node == config.node {
        // This node's own record from an earlier lease (it expires with that lease), or
        // someone speaking for this node: never a peer either way.
        return Err(Rule::OwnNode.refuse(format!("record names this node ({node})")));
    }
    Ok(node)
}

/// A peer's IPv6 subnet must be exactly the one paired with the IPv4 subnet of its key
/// (so it lies in `--network6`, has `--subnet-len6` and is held by whoever holds the key).
/// A node without `--network6` ignores it; a dual-stack node accepts a peer without one
/// (IPv4 only, as during a rollout of `--network6`).
fn checked_subnet6(
    config: &Config,
    subnet: Ipv4Net,
    claimed: Option<Ipv6Net>,
) -> Result<Option<Ipv6Net>, Refusal> {
    let (Some(paired), Some(claimed)) = (paired_subnet6(config, subnet), claimed) else { return Ok(None) };
    if claimed != paired {
        return Err(Rule::Subnet6
            .refuse(format!("subnet6 {claimed} is not {paired}, the IPv6 subnet paired with {subnet}")));
    }
    Ok(Some(paired))
}

/// An address VXLAN packets (or directly routed pod packets) may be sent to: a unicast
/// host address of the underlay's family outside the pod networks, not this node's own;
/// loopback only when this node's underlay is loopback too (nodes sharing one host, as in
/// a test).
fn checked_underlay(config: &Config, own: &Own, underlay: IpAddr) -> Result<IpAddr, Refusal> {
    let refused = |why: &str| Rule::Underlay.refuse(format!("underlay {underlay} {why}"));
    match (underlay, own.underlay) {
        (IpAddr::V4(v4), IpAddr::V4(_)) => checked_underlay4(v4).map_err(refused)?,
        (IpAddr::V6(v6), IpAddr::V6(_)) => checked_underlay6(v6).map_err(refused)?,
        (_, own_underlay) => {
            return Err(refused(&format!("is not of the family of this node's underlay {own_underlay}")))
        }
    }
    if underlay.is_loopback() && !own.underlay.is_loopback() {
        return Err(refused("is loopback"));
    }
    if underlay == own.underlay {
        return Err(refused("is this node's own address"));
    }
    let in_pods = match underlay {
        IpAddr::V4(v4) => config.network.contains(&v4),
        IpAddr::V6(v6) => config.network6.is_some_and(|n| n.contains(&v6)),
    };
    if in_pods {
        return Err(refused("lies inside the pod network"));
    }
    Ok(underlay)
}

fn checked_underlay4(underlay: Ipv4Addr) -> Result<(), &'static str> {
    if underlay.octets()[0] == 0 {
        return Err("is not a host address (0.0.0.0/8)");
    }
    if underlay.is_multicast() || underlay.is_broadcast() {
        return Err("is not unicast");
    }
    if underlay.octets()[0] >= 240 {
        return Err("is reserved (240.0.0.0/4)");
    }
    Ok(())
}

fn checked_underlay6(underlay: Ipv6Addr) -> Result<(), &'static str> {
    if underlay.is_unspecified() {
        return Err("is not a host address (::)");
    }
    if underlay.is_multicast() {
        return Err("is not unicast");
    }
    // A link-local address names no interface without a scope, which a record cannot give.
    if underlay.segments()[0] & 0xffc0 == 0xfe80 {
        return Err("is link-local (fe80::/10)");
    }
    if underlay.to_ipv4_mapped().is_some() {
        return Err("is an IPv4-mapped address (::ffff:0:0/96)");
    }
    Ok(())
}

/// The VTEP MAC must be the one every agent derives from its underlay address: a record
/// cannot claim another node's MAC (and so take over its FDB entry).
fn checked_vtep_mac(text: &str, underlay: IpAddr) -> Result<MacAddr, Refusal> {
    let mac: MacAddr =
        text.parse().map_err(|_| Rule::VtepMac.refuse(format!("vtepMac {text:?} is not a MAC address")))?;
    if mac.octets()[0] & 1 != 0 || mac == MacAddr::default() {
        return Err(Rule::VtepMac.refuse(format!("vtepMac {mac} is not a unicast address")));
    }
    let derived = vtep_mac(underlay);
    if mac != derived {
        return Err(Rule::VtepMac
            .refuse(format!("vtepMac {mac} is not {derived}, the one derived from underlay {underlay}")));
    }
    Ok(mac)
}

/// A WireGuard peer's key and port: both present, the key exactly 32 bytes of canonical
/// base64 and not this node's own (a record claiming it would make this node a peer of
/// itself), the port not 0 (JSON numbers past 65535 are already refused as malformed).
fn checked_wireguard(own: &Own, key: &Option<String>, port: Option<u16>) -> Result<WgIdentity, Refusal> {
    let text = key
        .as_deref()
        .ok_or_else(|| Rule::WgPublicKey.refuse("wgPublicKey missing: the peer is not a WireGuard node"))?;
    let public_key =
        wireguard::parse_key(text).map_err(|e| Rule::WgPublicKey.refuse(format!("wgPublicKey {e}")))?;
    if public_key == [0; wireguard::KEY_LEN] {
        return Err(Rule::WgPublicKey.refuse("wgPublicKey is all zeros"));
    }
    if own.wg_public_key == Some(public_key) {
        return Err(Rule::WgPublicKey.refuse("wgPublicKey is this node's own public key"));
    }
    match port {
        None => Err(Rule::WgPort.refuse("wgPort missing: the peer is not a WireGuard node")),
        Some(0) => Err(Rule::WgPort.refuse("wgPort 0 is not a port a peer can be reached on")),
        Some(port) => Ok(WgIdentity { public_key, port }),
    }
}

/// The peer's path under `--backend`. With `direct` a peer off this node's L2 cannot be
/// reached at all (a route via an address that is not on-link would send its pods'
/// packets to whatever the default route leads to): refused.
fn checked_path(config: &Config, own: &Own, underlay: IpAddr) -> Result<PeerPath, Refusal> {
    match (config.backend, own.is_onlink(underlay)) {
        (Backend::Wireguard, _) => Ok(PeerPath::Wireguard),
        (Backend::Vxlan, _) | (Backend::Auto, false) => Ok(PeerPath::Vxlan),
        (Backend::Direct | Backend::Auto, true) => Ok(PeerPath::Direct),
        (Backend::Direct, false) => Err(Rule::Underlay.refuse(format!(
            "underlay {underlay} is not on-link on --iface {} (in none of its prefixes): --backend direct \
             cannot reach it",
            config.iface
        ))),
    }
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
    /// A peer's record changed (a new underlay, path, key or IPv6 subnet).
    Replaced {
        old: PeerRecord,
        new: PeerRecord,
    },
    Left(PeerRecord),
    /// Refused, first time at this revision: log it. `dropped` is the peer whose record
    /// this was while it was good: it loses its entries.
    Refused {
        key: String,
        reason: Refusal,
        dropped: Option<PeerRecord>,
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
        let parsed = PeerRecord::parse(config, own, &kv.key, &kv.value, kv.lease)
            .and_then(|peer| self.unique_key(peer));
        match parsed {
            Ok(peer) => {
                self.refused.remove(&kv.key);
                match self.accepted.insert(peer.subnet, peer.clone()) {
                    Some(old) if old == peer => Change::Unchanged,
                    Some(old) => Change::Replaced { old, new: peer },
                    None => Change::Joined(peer),
                }
            }
            Err(reason) => {
                // A peer whose record turned bad loses its entries.
                let dropped =
                    lease::key_subnet(config, &kv.key).ok().and_then(|subnet| self.accepted.remove(&subnet));
                match self.refused.insert(kv.key.clone(), kv.mod_revision) {
                    Some(logged) if logged == kv.mod_revision && dropped.is_none() => Change::Unchanged,
                    _ => Change::Refused { key: kv.key_str(), reason, dropped },
                }
            }
        }
    }

    /// A WireGuard key already held by another peer is refused: the device keys its peers
    /// by public key, so a second record with one node's key would take that node's
    /// allowed IPs (and its pods' traffic) away from it.
    fn unique_key(&self, peer: PeerRecord) -> Result<PeerRecord, Refusal> {
        let Some(identity) = peer.wireguard else { return Ok(peer) };
        let holder = self.accepted.values().find(|other| {
            other.subnet != peer.subnet
                && other.wireguard.is_some_and(|o| o.public_key == identity.public_key)
        });
        match holder {
            Some(other) => Err(Rule::WgPublicKey
                .refuse(format!("wgPublicKey is already node {}'s (subnet {})", other.node, other.subnet))),
            None => Ok(peer),
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
mod tests;
