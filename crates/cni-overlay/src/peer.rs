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

/// A peer's IPv6 subnet must be exactly the one paired with the IPv4 subnet of its key
/// (so it lies in `--network6`, has `--subnet-len6` and is held by whoever holds the key).
/// A node without `--network6` ignores it; a dual-stack node accepts a peer without one
/// (IPv4 only, as during a rollout of `--network6`).
fn checked_subnet6(
    config: &Config,
    subnet: Ipv4Net,
    claimed: Option<Ipv6Net>,
) -> Result<Option<Ipv6Net>, String> {
    let (Some(paired), Some(claimed)) = (paired_subnet6(config, subnet), claimed) else { return Ok(None) };
    if claimed != paired {
        return Err(format!("subnet6 {claimed} is not {paired}, the IPv6 subnet paired with {subnet}"));
    }
    Ok(Some(paired))
}

/// An address VXLAN packets (or directly routed pod packets) may be sent to: a unicast
/// host address of the underlay's family outside the pod networks, not this node's own;
/// loopback only when this node's underlay is loopback too (nodes sharing one host, as in
/// a test).
fn checked_underlay(config: &Config, own: &Own, underlay: IpAddr) -> Result<IpAddr, String> {
    let refused = |why: &str| format!("underlay {underlay} {why}");
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
fn checked_vtep_mac(text: &str, underlay: IpAddr) -> Result<MacAddr, String> {
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

/// A WireGuard peer's key and port: both present, the key exactly 32 bytes of canonical
/// base64 and not this node's own (a record claiming it would make this node a peer of
/// itself), the port not 0 (JSON numbers past 65535 are already refused as malformed).
fn checked_wireguard(own: &Own, key: &Option<String>, port: Option<u16>) -> Result<WgIdentity, String> {
    let text = key.as_deref().ok_or("wgPublicKey missing: the peer is not a WireGuard node")?;
    let public_key = wireguard::parse_key(text).map_err(|e| format!("wgPublicKey {e}"))?;
    if public_key == [0; wireguard::KEY_LEN] {
        return Err("wgPublicKey is all zeros".into());
    }
    if own.wg_public_key == Some(public_key) {
        return Err("wgPublicKey is this node's own public key".into());
    }
    match port {
        None => Err("wgPort missing: the peer is not a WireGuard node".into()),
        Some(0) => Err("wgPort 0 is not a port a peer can be reached on".into()),
        Some(port) => Ok(WgIdentity { public_key, port }),
    }
}

/// The peer's path under `--backend`. With `direct` a peer off this node's L2 cannot be
/// reached at all (a route via an address that is not on-link would send its pods'
/// packets to whatever the default route leads to): refused.
fn checked_path(config: &Config, own: &Own, underlay: IpAddr) -> Result<PeerPath, String> {
    match (config.backend, own.is_onlink(underlay)) {
        (Backend::Wireguard, _) => Ok(PeerPath::Wireguard),
        (Backend::Vxlan, _) | (Backend::Auto, false) => Ok(PeerPath::Vxlan),
        (Backend::Direct | Backend::Auto, true) => Ok(PeerPath::Direct),
        (Backend::Direct, false) => Err(format!(
            "underlay {underlay} is not on-link on --iface {} (in none of its prefixes): --backend direct \
             cannot reach it",
            config.iface
        )),
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
        let parsed = PeerRecord::parse(config, own, &kv.key, &kv.value, kv.lease)
            .and_then(|peer| self.unique_key(peer));
        match parsed {
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

    /// A WireGuard key already held by another peer is refused: the device keys its peers
    /// by public key, so a second record with one node's key would take that node's
    /// allowed IPs (and its pods' traffic) away from it.
    fn unique_key(&self, peer: PeerRecord) -> Result<PeerRecord, String> {
        let Some(identity) = peer.wireguard else { return Ok(peer) };
        let holder = self.accepted.values().find(|other| {
            other.subnet != peer.subnet
                && other.wireguard.is_some_and(|o| o.public_key == identity.public_key)
        });
        match holder {
            Some(other) => {
                Err(format!("wgPublicKey is already node {}'s (subnet {})", other.node, other.subnet))
            }
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
        Own {
            subnet: "10.244.1.0/24".parse().unwrap(),
            subnet6: None,
            underlay: Ipv4Addr::new(192, 0, 2, 1).into(),
            onlink: vec!["192.0.2.0/24".parse().unwrap()],
            wg_public_key: None,
        }
    }

    fn own6() -> Own {
        Own {
            subnet: "10.244.1.0/24".parse().unwrap(),
            subnet6: Some("fd00:244:0:1::/64".parse().unwrap()),
            underlay: "2001:db8::1".parse().unwrap(),
            onlink: vec!["2001:db8::/64".parse().unwrap()],
            wg_public_key: None,
        }
    }

    fn record6(node: &str, underlay: &str, subnet6: &str) -> Vec<u8> {
        let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
        format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}","subnet6":"{subnet6}"}}"#)
            .into_bytes()
    }

    fn record(node: &str, underlay: &str) -> Vec<u8> {
        let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
        format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}"}}"#).into_bytes()
    }

    fn parse(key: &str, value: &[u8]) -> Result<PeerRecord, String> {
        PeerRecord::parse(&config(&[]), &own(), key.as_bytes(), value, 7)
    }

    #[test]
    fn a_genuine_record_is_accepted() {
        let peer = parse("/cni-rs/overlay/subnets/10.244.2.0-24", &record("n2", "192.0.2.2")).unwrap();
        assert_eq!(peer.subnet(), "10.244.2.0/24".parse::<Ipv4Net>().unwrap());
        assert_eq!((peer.node(), peer.underlay()), ("n2", Ipv4Addr::new(192, 0, 2, 2).into()));
        assert_eq!(peer.vtep_mac().to_string(), "0a:58:c0:00:02:02");
        assert_eq!((peer.path(), peer.subnet6()), (PeerPath::Vxlan, None));
    }

    #[test]
    fn the_backend_picks_each_peers_path() {
        let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
        let path = |backend: &str, underlay: &str| {
            PeerRecord::parse(&config(&["--backend", backend]), &own(), key, &record("n2", underlay), 7)
                .map(|p| p.path())
        };
        assert_eq!(path("vxlan", "192.0.2.2"), Ok(PeerPath::Vxlan));
        assert_eq!(path("direct", "192.0.2.2"), Ok(PeerPath::Direct));
        assert_eq!(path("auto", "192.0.2.2"), Ok(PeerPath::Direct));
        assert_eq!(path("auto", "198.51.100.2"), Ok(PeerPath::Vxlan));
        assert_eq!(path("vxlan", "198.51.100.2"), Ok(PeerPath::Vxlan));
        // Claimed as direct but not on this node's L2: refused, not routed into the void.
        let err = path("direct", "198.51.100.2").unwrap_err();
        assert!(err.contains("not on-link on --iface e"), "{err}");
    }

    #[test]
    fn dual_stack_records_are_checked_against_the_paired_subnet() {
        let config = config(&["--network6", "fd00:244::/48", "--backend", "auto"]);
        let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
        let parse = |value: Vec<u8>| PeerRecord::parse(&config, &own6(), key, &value, 7);
        let peer = parse(record6("n2", "2001:db8::2", "fd00:244:0:2::/64")).unwrap();
        assert_eq!(peer.subnet6(), Some("fd00:244:0:2::/64".parse().unwrap()));
        assert_eq!(
            (peer.path(), peer.vtep_mac()),
            (PeerPath::Direct, vtep_mac("2001:db8::2".parse::<IpAddr>().unwrap()))
        );
        let off_link = parse(record6("n2", "2001:db8:1::2", "fd00:244:0:2::/64")).unwrap();
        assert_eq!(off_link.path(), PeerPath::Vxlan);
        // A dual-stack node still accepts an IPv4-only peer.
        assert_eq!(parse(record("n2", "2001:db8::2")).unwrap().subnet6(), None);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            // Outside --network6, of the wrong length, another node's, this node's own.
            (record6("n2", "2001:db8::2", "fd00:999:0:2::/64"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "fd00:244::/48"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "fd00:244:0:2::/96"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "fd00:244:0:3::/64"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "fd00:244:0:1::/64"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "::/0"), "not fd00:244:0:2::/64"),
            (record6("n2", "2001:db8::2", "nope"), "record:"),
            (record6("n2", "2001:db8::2", "10.244.2.0/24"), "record:"),
            // Underlays an IPv6 node must not send to.
            (record6("n2", "::", "fd00:244:0:2::/64"), "(::)"),
            (record6("n2", "ff02::1", "fd00:244:0:2::/64"), "not unicast"),
            (record6("n2", "fe80::2", "fd00:244:0:2::/64"), "link-local"),
            (record6("n2", "::ffff:192.0.2.2", "fd00:244:0:2::/64"), "IPv4-mapped"),
            (record6("n2", "::1", "fd00:244:0:2::/64"), "loopback"),
            (record6("n2", "2001:db8::1", "fd00:244:0:2::/64"), "this node's own address"),
            (record6("n2", "fd00:244:0:9::1", "fd00:244:0:2::/64"), "inside the pod network"),
            (record6("n2", "192.0.2.2", "fd00:244:0:2::/64"), "not of the family"),
        ];
        for (value, want) in cases {
            let err = parse(value.clone()).unwrap_err();
            assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
        }
        // An IPv4-only node ignores the key: the record reads as before.
        let v4 = PeerRecord::parse(
            &super::tests::config(&[]),
            &own(),
            key,
            &record6("n2", "192.0.2.2", "x::/64"),
            7,
        );
        assert!(v4.is_err(), "an unparsable subnet6 is a malformed record for every node");
        let v4 = PeerRecord::parse(
            &super::tests::config(&[]),
            &own(),
            key,
            &record6("n2", "192.0.2.2", "fd00::/64"),
            7,
        );
        assert_eq!(v4.unwrap().subnet6(), None);
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

    fn wg_record(node: &str, underlay: &str, key: &str, port: &str) -> Vec<u8> {
        let mac = vtep_mac(underlay.parse::<IpAddr>().unwrap());
        format!(
            r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}","wgPublicKey":"{key}","wgPort":{port}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn wireguard_records_carry_an_exact_key_and_a_port() {
        let config = config(&["--backend", "wireguard"]);
        let own = Own { wg_public_key: Some([1; 32]), ..own() };
        let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
        let parse = |value: Vec<u8>| PeerRecord::parse(&config, &own, key, &value, 7);
        let good = wireguard::base64(&[2; 32]);
        let peer = parse(wg_record("n2", "198.51.100.2", &good, "51820")).unwrap();
        assert_eq!(peer.path(), PeerPath::Wireguard, "any underlay: WireGuard needs no shared L2");
        assert_eq!(peer.wireguard(), Some(WgIdentity { public_key: [2; 32], port: 51820 }));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (record("n2", "192.0.2.2"), "wgPublicKey missing"),
            (wg_record("n2", "192.0.2.2", &good, "null"), "wgPort missing"),
            (wg_record("n2", "192.0.2.2", &good, "0"), "wgPort 0"),
            (wg_record("n2", "192.0.2.2", &good, "65536"), "record:"),
            (wg_record("n2", "192.0.2.2", &good, "-1"), "record:"),
            (wg_record("n2", "192.0.2.2", &good, "\"51820\""), "record:"),
            (
                wg_record("n2", "192.0.2.2", &wireguard::base64(&[1; 32]), "51820"),
                "this node's own public key",
            ),
            (wg_record("n2", "192.0.2.2", &wireguard::base64(&[0; 32]), "51820"), "all zeros"),
            (wg_record("n2", "192.0.2.2", &good[..43], "51820"), "43 characters"),
            (wg_record("n2", "192.0.2.2", &format!("{good}A"), "51820"), "45 characters"),
            (wg_record("n2", "192.0.2.2", &format!("{}r=", &good[..42]), "51820"), "not base64"),
            (wg_record("n2", "192.0.2.2", &"*".repeat(44), "51820"), "not base64"),
            (wg_record("n2", "192.0.2.2", &"A".repeat(900), "51820"), "900 characters"),
            // The other fields are still checked.
            (wg_record("n2", "224.0.0.1", &good, "51820"), "not unicast"),
        ];
        for (value, want) in cases {
            let err = parse(value.clone()).unwrap_err();
            assert!(err.contains(want), "{}: {err}", String::from_utf8_lossy(&value));
        }
        // A VXLAN node reads a WireGuard node's record as before (the extra keys ignored).
        let vxlan = PeerRecord::parse(
            &super::tests::config(&[]),
            &own,
            key,
            &wg_record("n2", "192.0.2.2", "x", "1"),
            7,
        );
        assert_eq!(vxlan.unwrap().wireguard(), None);
    }

    #[test]
    fn a_record_claiming_another_peers_key_is_refused() {
        let config = config(&["--backend", "wireguard"]);
        let own = Own { wg_public_key: Some([1; 32]), ..own() };
        let kv = |subnet: &str, value: Vec<u8>| KeyValue {
            key: format!("/cni-rs/overlay/subnets/{subnet}").into_bytes(),
            value,
            create_revision: 1,
            mod_revision: 2,
            lease: 7,
        };
        let key_b = wireguard::base64(&[2; 32]);
        let b = kv("10.244.2.0-24", wg_record("b", "192.0.2.2", &key_b, "51820"));
        let thief = kv("10.244.3.0-24", wg_record("c", "192.0.2.3", &key_b, "51820"));
        let mut peers = Peers::default();
        assert!(matches!(peers.put(&config, &own, &b), Change::Joined(_)));
        match peers.put(&config, &own, &thief) {
            Change::Refused { reason, .. } => assert!(reason.contains("already node b's"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(peers.accepted().len(), 1);
        // b itself rotating to a new key is a change of b, not a clash.
        let rotated = kv("10.244.2.0-24", wg_record("b", "192.0.2.2", &wireguard::base64(&[3; 32]), "51820"));
        assert!(matches!(peers.put(&config, &own, &rotated), Change::Joined(_)));
        let now = peers.accepted().values().next().unwrap().wireguard().unwrap();
        assert_eq!(now.public_key, [3; 32]);
    }

    #[test]
    fn loopback_peers_only_for_a_loopback_node() {
        let own = Own { underlay: Ipv4Addr::LOCALHOST.into(), ..own() };
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
