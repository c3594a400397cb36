//! The bytes of the WireGuard family's messages and of the `nlctrl` lookup that finds it.
//! Requests are built from `netlink-packet-wireguard`'s and `netlink-packet-generic`'s
//! types and framed by `netlink-packet-core`; answers are read here. Numbers are from
//! `linux/genetlink.h` and `linux/wireguard.h`; integers are in host order except ports
//! inside a `sockaddr` (network order, as the kernel's own struct).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ipnet::IpNet;
use netlink_packet_core::{Emitable, NetlinkMessage, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_generic::constants::GENL_ID_CTRL;
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlMessage};
use netlink_packet_wireguard::{
    WireguardAddressFamily, WireguardAllowedIp, WireguardAllowedIpAttr, WireguardAttribute, WireguardCmd,
    WireguardMessage, WireguardPeer, WireguardPeerAttribute, WireguardPeerFlags,
};

use super::{Key, WgDevice, WgPeer, KEY_LEN};
use crate::error::NetlinkError;
use crate::nft::attr::{Attr, AttrIter};
use crate::transport::Message;

// linux/genetlink.h: what is read of the answers
const CTRL_ATTR_FAMILY_ID: u16 = 1;

// linux/wireguard.h
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_PEERS: u16 = 8;
const WGPEER_A_PUBLIC_KEY: u16 = 1;
const WGPEER_A_ENDPOINT: u16 = 4;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGALLOWEDIP_A_IPADDR: u16 = 2;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

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
    let mut packet = NetlinkMessage::from(message);
    packet.header.flags = flags;
    packet.header.sequence_number = sequence;
    packet.finalize();
    let mut bytes = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut bytes);
    bytes
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

/// The attributes after a message's generic-netlink header.
fn attributes<'a>(message: &Message<'a>) -> Result<Vec<Attr<'a>>, NetlinkError> {
    let payload = message.payload();
    let attrs = payload.get(4..).ok_or_else(|| malformed("message shorter than its genetlink header"))?;
    AttrIter::new(attrs).collect::<Result<_, _>>().map_err(malformed)
}

fn nested<'a>(attr: &Attr<'a>) -> Result<Vec<Attr<'a>>, NetlinkError> {
    attr.nested().collect::<Result<_, _>>().map_err(malformed)
}

fn exact<const N: usize>(attr: &Attr<'_>, what: &str) -> Result<[u8; N], NetlinkError> {
    attr.payload.try_into().map_err(|_| malformed(format!("{what} of {} bytes, not {N}", attr.payload.len())))
}

/// The family id in nlctrl's answer.
pub(super) fn decode_family_id(message: Message<'_>) -> Result<u16, NetlinkError> {
    let id = attributes(&message)?
        .into_iter()
        .find(|a| a.kind == CTRL_ATTR_FAMILY_ID)
        .ok_or_else(|| malformed("nlctrl answered without a family id"))?;
    Ok(u16::from_ne_bytes(exact(&id, "family id")?))
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

fn decode_sockaddr(bytes: &[u8]) -> Result<SocketAddr, NetlinkError> {
    let family = bytes.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    match family {
        Some(AF_INET) if bytes.len() >= 8 => {
            let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
            Ok(SocketAddrV4::new(ip, port(bytes)).into())
        }
        Some(AF_INET6) if bytes.len() >= 24 => {
            let ip: [u8; 16] = bytes[8..24].try_into().expect("16 bytes");
            Ok(SocketAddrV6::new(Ipv6Addr::from(ip), port(bytes), 0, 0).into())
        }
        _ => Err(malformed(format!("endpoint of {} bytes is no sockaddr", bytes.len()))),
    }
}

fn decode_allowed_ip(attrs: &[Attr<'_>]) -> Result<IpNet, NetlinkError> {
    let (mut address, mut mask) = (None, None);
    for attr in attrs {
        match attr.kind {
            WGALLOWEDIP_A_IPADDR => match attr.payload.len() {
                4 => address = Some(IpAddr::from(exact::<4>(attr, "IPv4 address")?)),
                16 => address = Some(IpAddr::from(exact::<16>(attr, "IPv6 address")?)),
                n => return Err(malformed(format!("allowed IP of {n} bytes"))),
            },
            WGALLOWEDIP_A_CIDR_MASK => mask = Some(exact::<1>(attr, "CIDR mask")?[0]),
            _ => {}
        }
    }
    match (address, mask) {
        (Some(address), Some(mask)) => IpNet::new(address, mask).map_err(malformed),
        _ => Err(malformed("allowed IP without address or mask")),
    }
}

fn decode_peer(attrs: &[Attr<'_>]) -> Result<WgPeer, NetlinkError> {
    let mut peer = WgPeer { public_key: [0; KEY_LEN], endpoint: None, allowed_ips: Vec::new() };
    let mut keyed = false;
    for attr in attrs {
        match attr.kind {
            WGPEER_A_PUBLIC_KEY => {
                peer.public_key = exact(attr, "peer public key")?;
                keyed = true;
            }
            WGPEER_A_ENDPOINT => peer.endpoint = Some(decode_sockaddr(attr.payload)?),
            WGPEER_A_ALLOWEDIPS => {
                for ip in nested(attr)? {
                    peer.allowed_ips.push(decode_allowed_ip(&nested(&ip)?)?);
                }
            }
            _ => {}
        }
    }
    if !keyed {
        return Err(malformed("peer without a public key"));
    }
    Ok(peer)
}

/// One message of a device dump. The private key the kernel reports to an admin is
/// skipped, never copied.
pub(super) fn decode_device(message: Message<'_>) -> Result<WgDevice, NetlinkError> {
    let mut device = WgDevice::default();
    for attr in attributes(&message)? {
        match attr.kind {
            WGDEVICE_A_PUBLIC_KEY => device.public_key = Some(exact(&attr, "public key")?),
            WGDEVICE_A_LISTEN_PORT => device.listen_port = u16::from_ne_bytes(exact(&attr, "listen port")?),
            WGDEVICE_A_PEERS => {
                for peer in nested(&attr)? {
                    device.peers.push(decode_peer(&nested(&peer)?)?);
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
