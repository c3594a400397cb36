//! Golden bytes of the requests (as `wg(8)` frames them, checked field by field against
//! `linux/wireguard.h`) and decoding of the kernel's answers, which are written here with
//! this crate's own attribute writer rather than the crates the code uses, so neither side
//! checks itself. Little-endian hosts only: the attribute headers and integers are in host
//! order.
#![cfg(target_endian = "little")]

use super::*;
use crate::nft::attr::AttrWriter;
use crate::transport::message::{messages, HEADER_LEN};
use crate::transport::testing;
use crate::wireguard::KEY_LEN;
use ::base64::engine::general_purpose as base64;

const FAMILY: u16 = 0x1b;

// linux/genetlink.h and linux/wireguard.h, for the answers written here.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_VERSION: u16 = 3;
const CTRL_ATTR_OP_POLICY_NEXT: u16 = 11;
const WG_CMD_GET_DEVICE: u8 = 0;
const WG_GENL_VERSION: u8 = 1;
const WGDEVICE_A_IFINDEX: u16 = 1;
const WGDEVICE_A_IFNAME: u16 = 2;
const WGDEVICE_A_PRIVATE_KEY: u16 = 3;
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_PEERS: u16 = 8;
const WGPEER_A_PUBLIC_KEY: u16 = 1;
const WGPEER_A_PRESHARED_KEY: u16 = 2;
const WGPEER_A_FLAGS: u16 = 3;
const WGPEER_A_ENDPOINT: u16 = 4;
const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL: u16 = 5;
const WGPEER_A_LAST_HANDSHAKE_TIME: u16 = 6;
const WGPEER_A_RX_BYTES: u16 = 7;
const WGPEER_A_TX_BYTES: u16 = 8;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGPEER_A_PROTOCOL_VERSION: u16 = 10;
const WGALLOWEDIP_A_FAMILY: u16 = 1;
const WGALLOWEDIP_A_IPADDR: u16 = 2;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;

fn peer() -> WgPeer {
    WgPeer {
        public_key: [0x11; KEY_LEN],
        endpoint: Some("192.0.2.2:51820".parse().unwrap()),
        allowed_ips: vec!["10.244.2.0/24".parse().unwrap()],
    }
}

fn header(len: u8, kind: u16, flags: u16, sequence: u8, cmd: u8, version: u8) -> Vec<u8> {
    let [k0, k1] = kind.to_le_bytes();
    let [f0, f1] = flags.to_le_bytes();
    vec![len, 0, 0, 0, k0, k1, f0, f1, sequence, 0, 0, 0, 0, 0, 0, 0, cmd, version, 0, 0]
}

#[test]
fn family_lookup_names_wireguard() {
    let mut want = header(36, 0x10, 0x5, 3, 3, 2);
    want.extend([14, 0, 2, 0]);
    want.extend(b"wireguard\0\0\0");
    assert_eq!(get_family_request(3), want);
}

#[test]
fn device_dump_asks_by_index() {
    let mut want = header(28, FAMILY, 0x301, 4, 0, 1);
    want.extend([8, 0, 1, 0, 5, 0, 0, 0]);
    assert_eq!(get_device_request(FAMILY, 4, 5), want);
}

#[test]
fn key_and_port_request() {
    let mut want = header(72, FAMILY, 0x5, 6, 1, 1);
    want.extend([8, 0, 1, 0, 5, 0, 0, 0]);
    want.extend([36, 0, 3, 0]);
    want.extend([0x22; 32]);
    // 51820 = 0xca6c, host order in this attribute; 2 bytes of padding.
    want.extend([6, 0, 6, 0, 0x6c, 0xca, 0, 0]);
    assert_eq!(set_device_request(FAMILY, 6, 5, &[0x22; KEY_LEN], 51820), want);
}

#[test]
fn peer_request_replaces_its_allowed_ips() {
    let mut want = header(132, FAMILY, 0x5, 7, 1, 1);
    want.extend([8, 0, 1, 0, 5, 0, 0, 0]); // ifindex 5
    want.extend([104, 0, 8, 0x80]); // peers, nested
    want.extend([100, 0, 0, 0x80]); // peer 0, nested
    want.extend([36, 0, 1, 0]);
    want.extend([0x11; 32]); // public key
    want.extend([8, 0, 3, 0, 2, 0, 0, 0]); // flags: WGPEER_F_REPLACE_ALLOWEDIPS
    want.extend([20, 0, 4, 0, 2, 0, 0xca, 0x6c, 192, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0]); // sockaddr_in
    want.extend([32, 0, 9, 0x80]); // allowed IPs, nested
    want.extend([28, 0, 0, 0x80]); // allowed IP 0, nested
    want.extend([6, 0, 1, 0, 2, 0, 0, 0]); // AF_INET
    want.extend([8, 0, 2, 0, 10, 244, 2, 0]);
    want.extend([5, 0, 3, 0, 24, 0, 0, 0]); // /24
    assert_eq!(set_peer_request(FAMILY, 7, 5, &peer()), want);
}

#[test]
fn remove_request_flags_the_peer() {
    let mut want = header(80, FAMILY, 0x5, 8, 1, 1);
    want.extend([8, 0, 1, 0, 5, 0, 0, 0]);
    want.extend([52, 0, 8, 0x80, 48, 0, 0, 0x80, 36, 0, 1, 0]);
    want.extend([0x33; 32]);
    want.extend([8, 0, 3, 0, 1, 0, 0, 0]); // WGPEER_F_REMOVE_ME
    assert_eq!(remove_peer_request(FAMILY, 8, 5, &[0x33; KEY_LEN]), want);
}

#[test]
fn ipv6_endpoint_and_allowed_ip() {
    let address = "2001:db8::2".parse().unwrap();
    let endpoint = SocketAddr::from(SocketAddrV6::new(address, 51820, 0, 0));
    let wanted = WgPeer {
        public_key: [0x11; KEY_LEN],
        // Flow info and scope are not sent.
        endpoint: Some(SocketAddrV6::new(address, 51820, 0x12345, 4).into()),
        allowed_ips: vec!["fd00:244:0:2::/64".parse().unwrap()],
    };
    let request = set_peer_request(FAMILY, 7, 5, &wanted);
    // After the 20-byte header, ifindex, the two nest headers, key and flags.
    let sockaddr = &request[20 + 8 + 4 + 4 + 36 + 8..][..32];
    let mut want = vec![32, 0, 4, 0, 10, 0, 0xca, 0x6c, 0, 0, 0, 0];
    want.extend([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    want.extend([0, 0, 0, 0]);
    assert_eq!(sockaddr, want);
    let allowed = &request[20 + 8 + 4 + 4 + 36 + 8 + 32..];
    let mut want = vec![44, 0, 9, 0x80, 40, 0, 0, 0x80, 6, 0, 1, 0, 10, 0, 0, 0, 20, 0, 2, 0];
    want.extend([0xfd, 0, 2, 0x44, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend([5, 0, 3, 0, 64, 0, 0, 0]);
    assert_eq!(allowed, want);

    // The kernel reports the flow label and interface of a roamed peer's last packet.
    let datagram = device_message(|peers| {
        peers.nest(0, |p| {
            p.put(WGPEER_A_PUBLIC_KEY, &wanted.public_key);
            p.put(WGPEER_A_ENDPOINT, &sockaddr_in6(endpoint, 7, 3));
            p.nest(WGPEER_A_ALLOWEDIPS, |ips| ips.nest(0, |ip| allowed_ip_attrs(ip, &wanted.allowed_ips[0])));
        })
    });
    let device = decode(&datagram).unwrap();
    assert_eq!(device.peers, vec![WgPeer { endpoint: Some(endpoint), ..wanted }]);
}

/// `struct sockaddr_in` as the kernel writes it.
fn sockaddr_in(endpoint: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(a) = endpoint else { panic!("{endpoint} is not IPv4") };
    let mut bytes = 2u16.to_ne_bytes().to_vec();
    bytes.extend(a.port().to_be_bytes());
    bytes.extend(a.ip().octets());
    bytes.resize(16, 0);
    bytes
}

/// `struct sockaddr_in6` as the kernel writes it.
fn sockaddr_in6(endpoint: SocketAddr, flow: u32, scope: u32) -> Vec<u8> {
    let SocketAddr::V6(a) = endpoint else { panic!("{endpoint} is not IPv6") };
    let mut bytes = 10u16.to_ne_bytes().to_vec();
    bytes.extend(a.port().to_be_bytes());
    bytes.extend(flow.to_ne_bytes());
    bytes.extend(a.ip().octets());
    bytes.extend(scope.to_ne_bytes());
    bytes
}

fn allowed_ip_attrs(attrs: &mut AttrWriter, net: &IpNet) {
    let (family, address) = match net.addr() {
        IpAddr::V4(a) => (2u16, a.octets().to_vec()),
        IpAddr::V6(a) => (10u16, a.octets().to_vec()),
    };
    attrs.put(WGALLOWEDIP_A_FAMILY, &family.to_ne_bytes());
    attrs.put(WGALLOWEDIP_A_IPADDR, &address);
    attrs.put(WGALLOWEDIP_A_CIDR_MASK, &[net.prefix_len()]);
}

/// A generic-netlink message of type `kind` as the kernel frames it.
fn genl_message(kind: u16, cmd: u8, version: u8, attrs: AttrWriter) -> Vec<u8> {
    let mut body = vec![cmd, version, 0, 0];
    body.extend(attrs.buf);
    testing::message(kind, 0x2, 9, &body)
}

/// A dump message as the kernel writes it: ifindex and name, private key (skipped by the
/// decoder), public key, port, and the peers `fill` writes.
fn device_message(fill: impl FnOnce(&mut AttrWriter)) -> Vec<u8> {
    let mut attrs = AttrWriter::new();
    attrs.put(WGDEVICE_A_IFINDEX, &5u32.to_ne_bytes());
    attrs.put_str(WGDEVICE_A_IFNAME, "wg0");
    attrs.put(WGDEVICE_A_PRIVATE_KEY, &[0x99; KEY_LEN]);
    attrs.put(WGDEVICE_A_PUBLIC_KEY, &[0x44; KEY_LEN]);
    attrs.put(WGDEVICE_A_LISTEN_PORT, &51820u16.to_ne_bytes());
    attrs.nest(WGDEVICE_A_PEERS, fill);
    genl_message(FAMILY, WG_CMD_GET_DEVICE, WG_GENL_VERSION, attrs)
}

fn decode(datagram: &[u8]) -> Result<WgDevice, NetlinkError> {
    decode_device(messages(datagram).next().unwrap().unwrap())
}

/// [`peer`] with every attribute the kernel reports of a peer, in its order.
fn wanted_peer_message() -> Vec<u8> {
    let wanted = peer();
    device_message(|peers| {
        peers.nest(0, |p| {
            p.put(WGPEER_A_PUBLIC_KEY, &wanted.public_key);
            p.put(WGPEER_A_PRESHARED_KEY, &[0; KEY_LEN]);
            p.put(WGPEER_A_LAST_HANDSHAKE_TIME, &[0; 16]);
            p.put(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, &0u16.to_ne_bytes());
            p.put(WGPEER_A_TX_BYTES, &1u64.to_ne_bytes());
            p.put(WGPEER_A_RX_BYTES, &2u64.to_ne_bytes());
            p.put(WGPEER_A_PROTOCOL_VERSION, &1u32.to_ne_bytes());
            p.put(WGPEER_A_ENDPOINT, &sockaddr_in(wanted.endpoint.unwrap()));
            p.nest(WGPEER_A_ALLOWEDIPS, |ips| ips.nest(0, |ip| allowed_ip_attrs(ip, &wanted.allowed_ips[0])));
        })
    })
}

#[test]
fn a_device_dump_decodes_and_drops_the_private_key() {
    let device = decode(&wanted_peer_message()).unwrap();
    assert_eq!(device.public_key, Some([0x44; KEY_LEN]));
    assert_eq!(device.listen_port, 51820);
    assert_eq!(device.peers, vec![peer()]);
    assert!(!format!("{device:?}").contains("153"), "0x99, the private key's bytes, kept: {device:?}");
}

#[test]
fn attributes_not_read_are_not_parsed() {
    // A private key of the wrong size and an ifname that is no UTF-8 fail nothing.
    let mut attrs = AttrWriter::new();
    attrs.put(WGDEVICE_A_IFNAME, &[0xff, 0xfe, 0]);
    attrs.put(WGDEVICE_A_PRIVATE_KEY, &[0x99; 5]);
    attrs.put(WGDEVICE_A_LISTEN_PORT, &7u16.to_ne_bytes());
    let device = decode(&genl_message(FAMILY, WG_CMD_GET_DEVICE, WG_GENL_VERSION, attrs)).unwrap();
    assert_eq!(device, WgDevice { listen_port: 7, ..WgDevice::default() });
}

#[test]
fn malformed_answers_are_errors_not_panics() {
    let short_key = device_message(|peers| peers.nest(0, |p| p.put(WGPEER_A_PUBLIC_KEY, &[1; 31])));
    let error = decode(&short_key).unwrap_err().to_string();
    assert!(error.contains("WGPEER_A_PUBLIC_KEY"), "{error}");
    let keyless = device_message(|peers| peers.nest(0, |p| p.put(WGPEER_A_FLAGS, &0u32.to_ne_bytes())));
    assert!(decode(&keyless).unwrap_err().to_string().contains("without a public key"));
    let allowed_ip = |fill: fn(&mut AttrWriter)| {
        device_message(|peers| {
            peers.nest(0, |p| {
                p.put(WGPEER_A_PUBLIC_KEY, &[1; 32]);
                p.nest(WGPEER_A_ALLOWEDIPS, |ips| ips.nest(0, fill));
            })
        })
    };
    let bad_mask = allowed_ip(|ip| {
        ip.put(WGALLOWEDIP_A_IPADDR, &[10, 0, 0, 0]);
        ip.put(WGALLOWEDIP_A_CIDR_MASK, &[33]);
    });
    assert!(decode(&bad_mask).is_err());
    // netlink-packet-wireguard reads a mask's first byte without checking there is one:
    // an empty mask must be an error here, not a panic there.
    let empty_mask = allowed_ip(|ip| {
        ip.put(WGALLOWEDIP_A_IPADDR, &[10, 0, 0, 0]);
        ip.put(WGALLOWEDIP_A_CIDR_MASK, &[]);
    });
    assert!(decode(&empty_mask).unwrap_err().to_string().contains("CIDR mask of 0 bytes"));
    let long_mask = allowed_ip(|ip| {
        ip.put(WGALLOWEDIP_A_IPADDR, &[10, 0, 0, 0]);
        ip.put(WGALLOWEDIP_A_CIDR_MASK, &[8, 0]);
    });
    assert!(decode(&long_mask).unwrap_err().to_string().contains("CIDR mask of 2 bytes"));
    let no_mask = allowed_ip(|ip| ip.put(WGALLOWEDIP_A_IPADDR, &[10, 0, 0, 0]));
    assert!(decode(&no_mask).unwrap_err().to_string().contains("without address or mask"));
    let bad_endpoint = device_message(|peers| {
        peers.nest(0, |p| {
            p.put(WGPEER_A_PUBLIC_KEY, &[1; 32]);
            p.put(WGPEER_A_ENDPOINT, &[2, 0, 1]);
        })
    });
    assert!(decode(&bad_endpoint).is_err());
    let short = testing::message(FAMILY, 0x2, 9, &[WG_CMD_GET_DEVICE]);
    assert!(decode(&short).unwrap_err().to_string().contains("genetlink header"));
}

/// Every byte of a dump message with a peer, set to values that break lengths and sizes
/// (an attribute length 4 empties the attribute, a kind 0x03 makes one a CIDR mask):
/// decoding answers, with a device or an error, and never panics.
#[test]
fn no_corrupted_byte_makes_decoding_panic() {
    let datagram = wanted_peer_message();
    // Not the netlink header: a wrong message length is the transport's to catch.
    for at in HEADER_LEN..datagram.len() {
        for value in
            [0, 1, 3, 4, 5, 0x7f, 0x80, 0xff, datagram[at].wrapping_add(1), datagram[at].wrapping_sub(1)]
        {
            let mut corrupt = datagram.clone();
            corrupt[at] = value;
            let _ = decode(&corrupt);
        }
    }
}

#[test]
fn a_peer_split_over_two_messages_is_merged() {
    let part = |ips: &[&str], peers: &[[u8; 32]]| WgDevice {
        public_key: None,
        listen_port: 0,
        peers: peers
            .iter()
            .map(|k| WgPeer {
                public_key: *k,
                endpoint: None,
                allowed_ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
            })
            .collect(),
    };
    let first = WgDevice { public_key: Some([4; 32]), listen_port: 1, ..part(&["10.0.0.0/24"], &[[1; 32]]) };
    let merged = merge(vec![first, part(&["fd00::/64"], &[[1; 32], [2; 32]])]);
    assert_eq!((merged.public_key, merged.listen_port), (Some([4; 32]), 1));
    assert_eq!(merged.peers.len(), 2);
    assert_eq!(merged.peers[0].allowed_ips.len(), 2);
    assert_eq!(merged.peers[1].allowed_ips.len(), 1);
}

#[test]
fn the_family_id_is_read_from_nlctrls_answer() {
    let mut attrs = AttrWriter::new();
    attrs.put_str(CTRL_ATTR_FAMILY_NAME, "wireguard");
    attrs.put(CTRL_ATTR_FAMILY_ID, &0x1bu16.to_ne_bytes());
    attrs.put(CTRL_ATTR_VERSION, &1u32.to_ne_bytes());
    // An attribute kind the crates do not know, as a newer kernel could add.
    attrs.put(CTRL_ATTR_OP_POLICY_NEXT, &[1, 2, 3, 4]);
    let datagram = genl_message(GENL_ID_CTRL, 1, 2, attrs);
    assert_eq!(decode_family_id(messages(&datagram).next().unwrap().unwrap()).unwrap(), 0x1b);

    let mut attrs = AttrWriter::new();
    attrs.put_str(CTRL_ATTR_FAMILY_NAME, "wireguard");
    let datagram = genl_message(GENL_ID_CTRL, 1, 2, attrs);
    let error = decode_family_id(messages(&datagram).next().unwrap().unwrap()).unwrap_err();
    assert!(error.to_string().contains("without a family id"), "{error}");
    let mut attrs = AttrWriter::new();
    attrs.put(CTRL_ATTR_FAMILY_ID, &[0x1b]);
    let datagram = genl_message(GENL_ID_CTRL, 1, 2, attrs);
    assert!(decode_family_id(messages(&datagram).next().unwrap().unwrap()).is_err());
}

#[test]
fn keys_are_exact_canonical_base64() {
    let key = [0xab; KEY_LEN];
    let text = base64(&key);
    assert_eq!(text.len(), 44);
    assert_eq!(parse_key(&text), Ok(key));
    for bad in [
        String::new(),
        format!("{text} "),
        format!(" {}", &text[1..]),
        text.replace('=', "A"),
        base64::STANDARD.encode([0u8; 31]),
        base64::STANDARD.encode([0u8; 33]),
        "!".repeat(44),
        // Non-zero padding bits: decodes leniently elsewhere, refused here.
        format!("{}r=", &text[..42]),
    ] {
        assert!(parse_key(&bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn a_peer_with_more_allowed_ips_than_one_attribute_holds_is_refused_before_encoding() {
    let ipv6 = |i: usize| format!("fd00:{i:x}::/64").parse().unwrap();
    let mut most = peer();
    most.allowed_ips = (0..MAX_ALLOWED_IPS_PER_PEER).map(ipv6).collect();
    check_peer_size(&most).unwrap();
    // The largest accepted peer still fits the 16-bit length of the attribute it nests in.
    let request = set_peer_request(0x1c, 1, 7, &most);
    assert!(request.len() < usize::from(u16::MAX), "{} bytes", request.len());

    let mut too_many = most;
    too_many.allowed_ips.push(ipv6(MAX_ALLOWED_IPS_PER_PEER));
    let refused = check_peer_size(&too_many).unwrap_err().to_string();
    assert!(refused.contains("1025 allowed IPs for one peer, at most 1024"), "{refused}");
}
