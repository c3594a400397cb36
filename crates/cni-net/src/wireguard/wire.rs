//! The WireGuard family's messages and the `nlctrl` lookup that finds it, as bytes: built
//! from `netlink-packet-wireguard`'s and `netlink-packet-generic`'s types, framed by
//! `netlink-packet-core`, and read back with the same types. What this module adds is what
//! those crates leave to their user: the request flags, which attributes are read (the
//! private key is not), and one bound the crates' decoder lacks ([`check_masks`]).

use std::net::{IpAddr, SocketAddr, SocketAddrV6};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ipnet::IpNet;
use netlink_packet_core::{
    Emitable, NetlinkMessage, NlasIterator, Parseable, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_generic::constants::{CTRL_ATTR_FAMILY_ID, GENL_HDRLEN, GENL_ID_CTRL};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use netlink_packet_wireguard::{
    WireguardAddressFamily, WireguardAllowedIp, WireguardAllowedIpAttr, WireguardAttribute, WireguardCmd,
    WireguardMessage, WireguardPeer, WireguardPeerAttribute, WireguardPeerFlags,
};

use super::{Key, WgDevice, WgPeer};
use crate::error::NetlinkError;
use crate::transport::Message;

// linux/wireguard.h: the attributes this module looks at before handing them to the crate
// (whose own constants are private).
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_PEERS: u16 = 8;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;

/// A key as WireGuard writes it: standard base64 with padding (44 characters).
pub fn base64(key: &Key) -> String {
    STANDARD.encode(key)
}

/// A key from its base64 text: exactly the 44 characters [`base64`] writes for 32 bytes,
/// nothing else (no whitespace, no other length, no non-canonical padding bits).
pub fn parse_key(text: &str) -> Result<Key, String> {
    if text.len() != 44 {
        return Err(format!("is {} characters, not the 44 of a base64 32-byte key", text.len()));
    }
    let bytes = STANDARD.decode(text).map_err(|e| format!("is not base64: {e}"))?;
    let key: Key = bytes.try_into().map_err(|_| "does not decode to 32 bytes".to_string())?;
    if base64(&key) != text {
        return Err("is not the canonical base64 of its bytes".into());
    }
    Ok(key)
}

/// The bytes of one request: the generic-netlink header and `payload`'s attributes, in a
/// netlink message of type `family` (the id nlctrl gave; a family with a fixed id, nlctrl
/// itself, uses that one whatever is given).
fn encode<F: GenlFamily + Emitable + std::fmt::Debug>(
    payload: F,
    family: u16,
    flags: u16,
    sequence: u32,
) -> Vec<u8> {
    let mut message = GenlMessage::from_payload(payload);
    message.set_resolved_family_id(family);
    crate::netlink::codec::encode_packet(NetlinkMessage::from(message), flags, sequence)
}

/// `CTRL_CMD_GETFAMILY` for "wireguard".
pub(super) fn get_family_request(sequence: u32) -> Vec<u8> {
    let lookup = GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(WireguardMessage::family_name().to_string())],
    };
    encode(lookup, GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, sequence)
}

fn malformed(error: impl std::fmt::Display) -> NetlinkError {
    NetlinkError::Decode(error.to_string())
}

/// The attributes after a message's generic-netlink header, not parsed yet: each caller
/// parses only those it reads.
fn attributes<'a>(message: &Message<'a>) -> Result<NlasIterator<&'a [u8]>, NetlinkError> {
    let payload = message.payload();
    GenlHeader::parse(payload).map_err(|_| malformed("message shorter than its genetlink header"))?;
    Ok(NlasIterator::new(&payload[GENL_HDRLEN..]))
}

/// The family id in nlctrl's answer. Only that attribute is parsed: the crate refuses an
/// attribute kind it does not know, and the kernel may add some to this answer.
pub(super) fn decode_family_id(message: Message<'_>) -> Result<u16, NetlinkError> {
    for attr in attributes(&message)? {
        let attr = attr.map_err(malformed)?;
        if attr.kind() == CTRL_ATTR_FAMILY_ID {
            return match GenlCtrlAttrs::parse(&attr).map_err(malformed)? {
                GenlCtrlAttrs::FamilyId(id) => Ok(id),
                other => Err(malformed(format!("nlctrl's family id read as {other:?}"))),
            };
        }
    }
    Err(malformed("nlctrl answered without a family id"))
}

/// `WG_CMD_GET_DEVICE` (always a dump) of the device with this index.
pub(super) fn get_device_request(family: u16, sequence: u32, index: u32) -> Vec<u8> {
    let message = WireguardMessage {
        cmd: WireguardCmd::GetDevice,
        attributes: vec![WireguardAttribute::IfIndex(index)],
    };
    encode(message, family, NLM_F_REQUEST | NLM_F_DUMP, sequence)
}

fn set_request(family: u16, sequence: u32, index: u32, rest: Vec<WireguardAttribute>) -> Vec<u8> {
    let mut attributes = vec![WireguardAttribute::IfIndex(index)];
    attributes.extend(rest);
    let message = WireguardMessage { cmd: WireguardCmd::SetDevice, attributes };
    encode(message, family, NLM_F_REQUEST | NLM_F_ACK, sequence)
}

/// `WG_CMD_SET_DEVICE` with the private key and the listen port.
pub(super) fn set_device_request(
    family: u16,
    sequence: u32,
    index: u32,
    private_key: &Key,
    listen_port: u16,
) -> Vec<u8> {
    let attributes =
        vec![WireguardAttribute::PrivateKey(*private_key), WireguardAttribute::ListenPort(listen_port)];
    set_request(family, sequence, index, attributes)
}

/// The most allowed IPs one peer is set with. The peer's attributes nest in one netlink
/// attribute, whose length is 16 bits: at 28 bytes per IPv6 allowed IP, about 2,300 would
/// overflow it (the encoder would wrap or panic), and no overlay peer needs more than a
/// few subnets.
pub const MAX_ALLOWED_IPS_PER_PEER: usize = 1024;

/// Refuses a peer whose allowed IPs would not fit the one nested attribute they are sent
/// in (see [`MAX_ALLOWED_IPS_PER_PEER`]), before anything is encoded.
pub(super) fn check_peer_size(peer: &WgPeer) -> Result<(), NetlinkError> {
    let count = peer.allowed_ips.len();
    if count > MAX_ALLOWED_IPS_PER_PEER {
        return Err(NetlinkError::Unexpected(format!(
            "{count} allowed IPs for one peer, at most {MAX_ALLOWED_IPS_PER_PEER}"
        )));
    }
    Ok(())
}

/// `WG_CMD_SET_DEVICE` with one peer: its endpoint, and its allowed IPs replacing the ones
/// it had.
pub(super) fn set_peer_request(family: u16, sequence: u32, index: u32, peer: &WgPeer) -> Vec<u8> {
    let mut attributes = vec![
        WireguardPeerAttribute::PublicKey(peer.public_key),
        WireguardPeerAttribute::Flags(WireguardPeerFlags::ReplaceAllowedIps),
    ];
    if let Some(endpoint) = peer.endpoint {
        attributes.push(WireguardPeerAttribute::Endpoint(without_flow_and_scope(endpoint)));
    }
    attributes.push(WireguardPeerAttribute::AllowedIps(peer.allowed_ips.iter().map(allowed_ip).collect()));
    set_request(family, sequence, index, vec![WireguardAttribute::Peers(vec![WireguardPeer(attributes)])])
}

/// `WG_CMD_SET_DEVICE` removing the peer with this key.
pub(super) fn remove_peer_request(family: u16, sequence: u32, index: u32, public_key: &Key) -> Vec<u8> {
    let peer = WireguardPeer(vec![
        WireguardPeerAttribute::PublicKey(*public_key),
        WireguardPeerAttribute::Flags(WireguardPeerFlags::RemoveMe),
    ]);
    set_request(family, sequence, index, vec![WireguardAttribute::Peers(vec![peer])])
}

fn allowed_ip(net: &IpNet) -> WireguardAllowedIp {
    let family = match net.addr() {
        IpAddr::V4(_) => WireguardAddressFamily::Ipv4,
        IpAddr::V6(_) => WireguardAddressFamily::Ipv6,
    };
    WireguardAllowedIp(vec![
        WireguardAllowedIpAttr::Family(family),
        WireguardAllowedIpAttr::IpAddr(net.addr()),
        WireguardAllowedIpAttr::Cidr(net.prefix_len()),
    ])
}

/// An IPv6 endpoint with flow info and scope 0, both ways: what is sent carries neither,
/// and what the kernel reports after the peer roamed (the flow label and interface of its
/// last packet) is not part of where the peer is, so a comparison with the wanted peer
/// does not see a change there.
fn without_flow_and_scope(endpoint: SocketAddr) -> SocketAddr {
    match endpoint {
        SocketAddr::V6(a) => SocketAddrV6::new(*a.ip(), a.port(), 0, 0).into(),
        v4 => v4,
    }
}

/// Refuses an allowed IP whose `WGALLOWEDIP_A_CIDR_MASK` is not one byte, in the value of
/// a `WGDEVICE_A_PEERS`. The crate reads that attribute's first byte without looking at its
/// length: an empty one would panic in it, so the nest is walked here first. Other
/// malformations are left to the crate's parser, which reports them as errors.
fn check_masks(peers: &[u8]) -> Result<(), NetlinkError> {
    for peer in NlasIterator::new(peers) {
        let peer = peer.map_err(malformed)?;
        for attr in NlasIterator::new(peer.value()) {
            let attr = attr.map_err(malformed)?;
            if attr.kind() != WGPEER_A_ALLOWEDIPS {
                continue;
            }
            for ip in NlasIterator::new(attr.value()) {
                let ip = ip.map_err(malformed)?;
                for ip_attr in NlasIterator::new(ip.value()) {
                    let ip_attr = ip_attr.map_err(malformed)?;
                    let len = ip_attr.value_length();
                    if ip_attr.kind() == WGALLOWEDIP_A_CIDR_MASK && len != 1 {
                        return Err(malformed(format!("CIDR mask of {len} bytes, not 1")));
                    }
                }
            }
        }
    }
    Ok(())
}

fn decode_allowed_ip(ip: WireguardAllowedIp) -> Result<IpNet, NetlinkError> {
    let (mut address, mut mask) = (None, None);
    for attr in ip.0 {
        match attr {
            WireguardAllowedIpAttr::IpAddr(a) => address = Some(a),
            WireguardAllowedIpAttr::Cidr(m) => mask = Some(m),
            _ => {}
        }
    }
    match (address, mask) {
        (Some(address), Some(mask)) => IpNet::new(address, mask).map_err(malformed),
        _ => Err(malformed("allowed IP without address or mask")),
    }
}

/// A peer as the crate parsed it, whole: its preshared key too (this module sets none,
/// so all zeros), counters and handshake time, each refused at a size the kernel never
/// sends.
fn decode_peer(peer: WireguardPeer) -> Result<WgPeer, NetlinkError> {
    let (mut public_key, mut endpoint, mut allowed_ips) = (None, None, Vec::new());
    for attr in peer.0 {
        match attr {
            WireguardPeerAttribute::PublicKey(key) => public_key = Some(key),
            WireguardPeerAttribute::Endpoint(a) => endpoint = Some(without_flow_and_scope(a)),
            WireguardPeerAttribute::AllowedIps(ips) => {
                for ip in ips {
                    allowed_ips.push(decode_allowed_ip(ip)?);
                }
            }
            _ => {}
        }
    }
    let public_key = public_key.ok_or_else(|| malformed("peer without a public key"))?;
    Ok(WgPeer { public_key, endpoint, allowed_ips })
}

/// One message of a device dump: its public key, port and peers. The private key the
/// kernel reports to an admin is skipped, never copied.
pub(super) fn decode_device(message: Message<'_>) -> Result<WgDevice, NetlinkError> {
    let mut device = WgDevice::default();
    for attr in attributes(&message)? {
        let attr = attr.map_err(malformed)?;
        match attr.kind() {
            WGDEVICE_A_PUBLIC_KEY | WGDEVICE_A_LISTEN_PORT => {}
            WGDEVICE_A_PEERS => check_masks(attr.value())?,
            // Not read, so not parsed: the private key among them is never copied, and an
            // attribute a kernel adds or formats otherwise cannot fail the dump.
            _ => continue,
        }
        match WireguardAttribute::parse(&attr).map_err(malformed)? {
            WireguardAttribute::PublicKey(key) => device.public_key = Some(key),
            WireguardAttribute::ListenPort(port) => device.listen_port = port,
            WireguardAttribute::Peers(peers) => {
                for peer in peers {
                    device.peers.push(decode_peer(peer)?);
                }
            }
            _ => {}
        }
    }
    Ok(device)
}

/// The messages of one dump as one device: the kernel repeats a peer whose allowed IPs
/// did not fit in one message at the start of the next, with the rest of them.
pub(super) fn merge(parts: Vec<WgDevice>) -> WgDevice {
    let mut parts = parts.into_iter();
    let Some(mut device) = parts.next() else { return WgDevice::default() };
    for part in parts {
        for peer in part.peers {
            match device.peers.last_mut() {
                Some(last) if last.public_key == peer.public_key => last.allowed_ips.extend(peer.allowed_ips),
                _ => device.peers.push(peer),
            }
        }
    }
    device
}

#[cfg(test)]
mod tests;
