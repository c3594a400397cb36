//! The bytes of the WireGuard family's messages and of the `nlctrl` lookup that finds it.
//! Numbers are from `linux/genetlink.h` and `linux/wireguard.h`; integers are in host
//! order except ports inside a `sockaddr` (network order, as the kernel's own struct).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ipnet::IpNet;

use super::{Key, WgDevice, WgPeer, KEY_LEN};
use crate::error::NetlinkError;
use crate::nft::attr::{Attr, AttrIter, AttrWriter};
use crate::transport::Message;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;

// linux/genetlink.h
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_VERSION: u8 = 2;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const FAMILY_NAME: &str = "wireguard";

// linux/wireguard.h
const WG_GENL_VERSION: u8 = 1;
const WG_CMD_GET_DEVICE: u8 = 0;
const WG_CMD_SET_DEVICE: u8 = 1;
const WGDEVICE_A_IFINDEX: u16 = 1;
const WGDEVICE_A_PRIVATE_KEY: u16 = 3;
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_PEERS: u16 = 8;
const WGPEER_A_PUBLIC_KEY: u16 = 1;
const WGPEER_A_FLAGS: u16 = 3;
const WGPEER_A_ENDPOINT: u16 = 4;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGPEER_F_REMOVE_ME: u32 = 1;
const WGPEER_F_REPLACE_ALLOWEDIPS: u32 = 2;
const WGALLOWEDIP_A_FAMILY: u16 = 1;
const WGALLOWEDIP_A_IPADDR: u16 = 2;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// `sizeof(struct sockaddr_in)` and `sizeof(struct sockaddr_in6)`.
const SOCKADDR_IN_LEN: usize = 16;
const SOCKADDR_IN6_LEN: usize = 28;

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

/// A netlink message of `kind` carrying a generic-netlink header (`cmd`, `version`) and
/// the attributes `attrs` wrote.
fn frame(kind: u16, flags: u16, sequence: u32, cmd: u8, version: u8, attrs: AttrWriter) -> Vec<u8> {
    let len = 16 + 4 + attrs.buf.len();
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&(len as u32).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(&flags.to_ne_bytes());
    bytes.extend_from_slice(&sequence.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    bytes.extend_from_slice(&[cmd, version, 0, 0]);
    bytes.extend_from_slice(&attrs.buf);
    bytes
}

/// `CTRL_CMD_GETFAMILY` for "wireguard".
pub(super) fn get_family_request(sequence: u32) -> Vec<u8> {
    let mut attrs = AttrWriter::new();
    attrs.put_str(CTRL_ATTR_FAMILY_NAME, FAMILY_NAME);
    frame(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, sequence, CTRL_CMD_GETFAMILY, CTRL_VERSION, attrs)
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
    let mut attrs = AttrWriter::new();
    attrs.put(WGDEVICE_A_IFINDEX, &index.to_ne_bytes());
    frame(family, NLM_F_REQUEST | NLM_F_DUMP, sequence, WG_CMD_GET_DEVICE, WG_GENL_VERSION, attrs)
}

fn set_request(family: u16, sequence: u32, index: u32, fill: impl FnOnce(&mut AttrWriter)) -> Vec<u8> {
    let mut attrs = AttrWriter::new();
    attrs.put(WGDEVICE_A_IFINDEX, &index.to_ne_bytes());
    fill(&mut attrs);
    frame(family, NLM_F_REQUEST | NLM_F_ACK, sequence, WG_CMD_SET_DEVICE, WG_GENL_VERSION, attrs)
}

/// `WG_CMD_SET_DEVICE` with the private key and the listen port.
pub(super) fn set_device_request(
    family: u16,
    sequence: u32,
    index: u32,
    private_key: &Key,
    listen_port: u16,
) -> Vec<u8> {
    set_request(family, sequence, index, |attrs| {
        attrs.put(WGDEVICE_A_PRIVATE_KEY, private_key);
        attrs.put(WGDEVICE_A_LISTEN_PORT, &listen_port.to_ne_bytes());
    })
}

/// `WG_CMD_SET_DEVICE` with one peer: its endpoint, and its allowed IPs replacing the ones
/// it had.
pub(super) fn set_peer_request(family: u16, sequence: u32, index: u32, peer: &WgPeer) -> Vec<u8> {
    set_request(family, sequence, index, |attrs| {
        attrs.nest(WGDEVICE_A_PEERS, |peers| {
            peers.nest(0, |p| {
                p.put(WGPEER_A_PUBLIC_KEY, &peer.public_key);
                p.put(WGPEER_A_FLAGS, &WGPEER_F_REPLACE_ALLOWEDIPS.to_ne_bytes());
                if let Some(endpoint) = peer.endpoint {
                    p.put(WGPEER_A_ENDPOINT, &sockaddr(endpoint));
                }
                p.nest(WGPEER_A_ALLOWEDIPS, |ips| {
                    for net in &peer.allowed_ips {
                        ips.nest(0, |ip| allowed_ip(ip, net));
                    }
                });
            });
        });
    })
}

/// `WG_CMD_SET_DEVICE` removing the peer with this key.
pub(super) fn remove_peer_request(family: u16, sequence: u32, index: u32, public_key: &Key) -> Vec<u8> {
    set_request(family, sequence, index, |attrs| {
        attrs.nest(WGDEVICE_A_PEERS, |peers| {
            peers.nest(0, |p| {
                p.put(WGPEER_A_PUBLIC_KEY, public_key);
                p.put(WGPEER_A_FLAGS, &WGPEER_F_REMOVE_ME.to_ne_bytes());
            });
        });
    })
}

fn allowed_ip(attrs: &mut AttrWriter, net: &IpNet) {
    let (family, address) = match net.addr() {
        IpAddr::V4(a) => (AF_INET, a.octets().to_vec()),
        IpAddr::V6(a) => (AF_INET6, a.octets().to_vec()),
    };
    attrs.put(WGALLOWEDIP_A_FAMILY, &family.to_ne_bytes());
    attrs.put(WGALLOWEDIP_A_IPADDR, &address);
    attrs.put(WGALLOWEDIP_A_CIDR_MASK, &[net.prefix_len()]);
}

/// `struct sockaddr_in` / `struct sockaddr_in6` (flow info and scope 0).
fn sockaddr(endpoint: SocketAddr) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SOCKADDR_IN6_LEN);
    match endpoint {
        SocketAddr::V4(a) => {
            bytes.extend_from_slice(&AF_INET.to_ne_bytes());
            bytes.extend_from_slice(&a.port().to_be_bytes());
            bytes.extend_from_slice(&a.ip().octets());
            bytes.resize(SOCKADDR_IN_LEN, 0);
        }
        SocketAddr::V6(a) => {
            bytes.extend_from_slice(&AF_INET6.to_ne_bytes());
            bytes.extend_from_slice(&a.port().to_be_bytes());
            bytes.extend_from_slice(&0u32.to_ne_bytes());
            bytes.extend_from_slice(&a.ip().octets());
            bytes.extend_from_slice(&0u32.to_ne_bytes());
        }
    }
    bytes
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
