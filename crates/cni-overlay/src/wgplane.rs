//! The WireGuard side of `--backend wireguard`: the node's device, its key and port, and
//! one WireGuard peer per accepted record (public key, endpoint = underlay address and
//! `wgPort`, allowed IPs = the peer's pod subnets). Routes to the peers' subnets go over
//! the device like VXLAN's ([`crate::dataplane::reconcile`]); the device then encrypts each
//! packet for the peer whose allowed IPs hold its destination, so pod traffic crosses the
//! underlay only as UDP between the nodes' WireGuard ports.
//!
//! Peers are reconciled against the device's own dump: a peer whose key is not in any
//! accepted record (its node left, or rotated its key) is removed, a missing or changed
//! one is set. An unchanged peer is not touched, so its session survives.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use cni_net::netlink::LinkSpec;
use cni_net::wireguard::{Key, WgPeer, WireGuard};
use cni_net::{MacAddr, Netlink};
use ipnet::{IpNet, Ipv4Net};

use crate::config::Config;
use crate::dataplane::{Device, DeviceKind, Failure, Underlay};
use crate::peer::PeerRecord;
use crate::{Error, Result};

/// Creates (or adopts) the WireGuard device, sets the node's key and listen port on it, and
/// returns it with the public key the kernel derived from the private one.
pub fn ensure_device(
    nl: &mut Netlink,
    wg: &mut WireGuard,
    config: &Config,
    underlay: &Underlay,
    private_key: &Key,
) -> Result<(Device, Key)> {
    let mtu = underlay.wireguard_mtu();
    let link = match nl.link_by_name(&config.device)? {
        Some(link) if !link.kind.is_wireguard() => {
            return Err(Error::Config(format!("{} exists and is not a WireGuard device", config.device)))
        }
        Some(link) => link,
        None => {
            nl.add_wireguard(&LinkSpec::new(&config.device).mtu(mtu))?;
            nl.require_link(&config.device)?
        }
    };
    if link.mtu != mtu {
        nl.set_link_mtu(link.index, mtu)?;
    }
    wg.set_device(link.index, private_key, config.port)?;
    let public_key = wg.device(link.index)?.public_key.ok_or_else(|| {
        Error::Config(format!(
            "{}: the kernel reports no public key after the private key was set",
            config.device
        ))
    })?;
    Ok((Device { index: link.index, mac: MacAddr::default(), mtu, kind: DeviceKind::Wireguard }, public_key))
}

/// The WireGuard peer a record stands for (None: not a WireGuard peer).
pub fn wanted_peer(peer: &PeerRecord) -> Option<WgPeer> {
    let identity = peer.wireguard()?;
    let allowed_ips =
        std::iter::once(IpNet::V4(peer.subnet())).chain(peer.subnet6().map(IpNet::V6)).collect();
    Some(WgPeer {
        public_key: identity.public_key,
        endpoint: Some(SocketAddr::new(peer.underlay(), identity.port)),
        allowed_ips,
    })
}

/// Whether the kernel's peer already is `wanted` (allowed IPs compared as a set).
fn same(kernel: &WgPeer, wanted: &WgPeer) -> bool {
    let set = |p: &WgPeer| p.allowed_ips.iter().map(IpNet::trunc).collect::<BTreeSet<_>>();
    kernel.endpoint == wanted.endpoint && set(kernel) == set(wanted)
}

/// Makes the device's peers exactly those of `peers`; each refused request is a
/// [`Failure`] (the others still converge), only a failed dump is an error.
pub fn reconcile(
    wg: &mut WireGuard,
    device: &Device,
    peers: &BTreeMap<Ipv4Net, PeerRecord>,
) -> Result<Vec<Failure>> {
    let wanted: Vec<(&PeerRecord, WgPeer)> =
        peers.values().filter_map(|p| Some((p, wanted_peer(p)?))).collect();
    let wanted_keys: BTreeSet<Key> = wanted.iter().map(|(_, w)| w.public_key).collect();
    let kernel = wg.device(device.index)?;
    let mut failures = Vec::new();
    // Removals first: a node that rotated its key must not keep its subnets on the old key
    // (the kernel would move them anyway, but the old peer would linger without them).
    for stale in kernel.peers.iter().filter(|p| !wanted_keys.contains(&p.public_key)) {
        if let Err(error) = wg.remove_peer(device.index, &stale.public_key) {
            let subject = format!("stale WireGuard peer {}", cni_net::wireguard::base64(&stale.public_key));
            failures.push(Failure { subject, error });
        }
    }
    for (record, peer) in wanted {
        if kernel.peers.iter().any(|k| k.public_key == peer.public_key && same(k, &peer)) {
            continue;
        }
        if let Err(error) = wg.set_peer(device.index, &peer) {
            let subject = format!("WireGuard peer {} ({})", record.node(), record.subnet());
            failures.push(Failure { subject, error });
        }
    }
    Ok(failures)
}

/// One peer's change on the device without reading it: the old key's peer removed when
/// the new record has another key (or none), the new peer set (a set replaces its
/// endpoint and allowed IPs).
pub fn program_change(
    wg: &mut WireGuard,
    device: &Device,
    old: Option<&PeerRecord>,
    new: Option<&PeerRecord>,
) -> Vec<Failure> {
    let mut failures = Vec::new();
    let wanted = new.and_then(wanted_peer);
    if let Some(stale) = old.and_then(wanted_peer) {
        if wanted.as_ref().is_none_or(|w| w.public_key != stale.public_key) {
            if let Err(error) = wg.remove_peer(device.index, &stale.public_key) {
                let subject = format!("old WireGuard peer {}", cni_net::wireguard::base64(&stale.public_key));
                failures.push(Failure { subject, error });
            }
        }
    }
    if let (Some(record), Some(peer)) = (new, wanted) {
        if let Err(error) = wg.set_peer(device.index, &peer) {
            let subject = format!("WireGuard peer {} ({})", record.node(), record.subnet());
            failures.push(Failure { subject, error });
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::Own;

    fn wireguard_config() -> Config {
        let args: Vec<String> =
            ["--etcd-endpoints", "http://a:1", "--iface", "e", "--node", "n1", "--backend", "wireguard"]
                .iter()
                .chain(&["--network6", "fd00:244::/48"])
                .map(|s| s.to_string())
                .collect();
        Config::parse(&args).unwrap()
    }

    /// A node whose underlay address is `underlay`.
    fn own(underlay: &str) -> Own {
        Own {
            subnet: "10.244.1.0/24".parse().unwrap(),
            subnet6: Some("fd00:244:0:1::/64".parse().unwrap()),
            underlay: underlay.parse().unwrap(),
            onlink: vec![],
            wg_public_key: Some([1; 32]),
        }
    }

    /// Node n2's record (subnets 10.244.2.0/24 and fd00:244:0:2::/64, key [2; 32], port
    /// 51821) with `underlay`, as `own` reads it.
    fn peer_record(own: &Own, underlay: &str) -> std::result::Result<PeerRecord, String> {
        let mac = crate::dataplane::vtep_mac(underlay.parse::<std::net::IpAddr>().unwrap());
        let key = cni_net::wireguard::base64(&[2; 32]);
        let value = format!(
            r#"{{"node":"n2","underlay":"{underlay}","vtepMac":"{mac}","subnet6":"fd00:244:0:2::/64","wgPublicKey":"{key}","wgPort":51821}}"#
        );
        let key = b"/cni-rs/overlay/subnets/10.244.2.0-24";
        PeerRecord::parse(&wireguard_config(), own, key, value.as_bytes(), 3).map_err(|e| e.to_string())
    }

    #[test]
    fn a_peer_is_its_key_endpoint_and_pod_subnets() {
        let record = peer_record(&own("192.0.2.1"), "192.0.2.2").unwrap();
        let peer = wanted_peer(&record).unwrap();
        assert_eq!(peer.public_key, [2; 32]);
        assert_eq!(peer.endpoint, Some("192.0.2.2:51821".parse().unwrap()));
        let want: Vec<IpNet> = vec!["10.244.2.0/24".parse().unwrap(), "fd00:244:0:2::/64".parse().unwrap()];
        assert_eq!(peer.allowed_ips, want);
        // The kernel lists allowed IPs in its own order: still the same peer.
        let reordered = WgPeer { allowed_ips: want.into_iter().rev().collect(), ..peer.clone() };
        assert!(same(&reordered, &peer));
        let moved = WgPeer { endpoint: Some("192.0.2.3:51821".parse().unwrap()), ..peer.clone() };
        assert!(!same(&moved, &peer));
    }

    /// Over an IPv6 underlay the endpoint is the peer's IPv6 address and port (the kernel
    /// gets a `sockaddr_in6`), and the allowed IPs are still both pod subnets.
    #[test]
    fn over_an_ipv6_underlay_the_endpoint_is_the_peers_ipv6_address() {
        let record = peer_record(&own("2001:db8:91::1"), "2001:db8:91::2").unwrap();
        let peer = wanted_peer(&record).unwrap();
        assert_eq!(peer.endpoint, Some("[2001:db8:91::2]:51821".parse().unwrap()));
        let want: Vec<IpNet> = vec!["10.244.2.0/24".parse().unwrap(), "fd00:244:0:2::/64".parse().unwrap()];
        assert_eq!(peer.allowed_ips, want);
    }

    /// A node of one underlay family cannot reach an endpoint of the other: such a record
    /// is refused, not programmed as a peer whose handshakes would go nowhere.
    #[test]
    fn an_endpoint_of_the_other_family_than_the_underlays_is_refused() {
        for (own_underlay, record_underlay) in
            [("2001:db8:91::1", "192.0.2.2"), ("192.0.2.1", "2001:db8:91::2")]
        {
            let refused = peer_record(&own(own_underlay), record_underlay).unwrap_err();
            assert!(refused.contains("is not of the family of this node's underlay"), "{refused}");
        }
    }
}
