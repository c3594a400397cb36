//! Golden bytes of the requests (as `wg(8)` frames them, checked field by field against
//! `linux/wireguard.h`) and decoding of the kernel's answers. Little-endian hosts only:
//! the attribute headers and integers are in host order.
#![cfg(target_endian = "little")]

use super::*;
use crate::transport::message::messages;
use ::base64::engine::general_purpose as base64;

const FAMILY: u16 = 0x1b;

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
    let endpoint: SocketAddr = "[2001:db8::2]:51820".parse().unwrap();
    let bytes = sockaddr(endpoint);
    assert_eq!(bytes.len(), SOCKADDR_IN6_LEN);
    assert_eq!(&bytes[..8], &[10, 0, 0xca, 0x6c, 0, 0, 0, 0]);
    assert_eq!(decode_sockaddr(&bytes).unwrap(), endpoint);
    let mut attrs = AttrWriter::new();
    allowed_ip(&mut attrs, &"fd00:244:0:2::/64".parse().unwrap());
    let decoded: Vec<Attr<'_>> = AttrIter::new(&attrs.buf).collect::<Result<_, _>>().unwrap();
    assert_eq!(decode_allowed_ip(&decoded).unwrap(), "fd00:244:0:2::/64".parse::<IpNet>().unwrap());
}

/// A dump message as the kernel writes it: header, private key (skipped by the decoder),
/// public key, port, and the peers `fill` writes.
fn device_message(fill: impl FnOnce(&mut AttrWriter)) -> Vec<u8> {
    let mut attrs = AttrWriter::new();
    attrs.put(WGDEVICE_A_IFINDEX, &5u32.to_ne_bytes());
    attrs.put(WGDEVICE_A_PRIVATE_KEY, &[0x99; KEY_LEN]);
    attrs.put(WGDEVICE_A_PUBLIC_KEY, &[0x44; KEY_LEN]);
    attrs.put(WGDEVICE_A_LISTEN_PORT, &51820u16.to_ne_bytes());
    attrs.nest(WGDEVICE_A_PEERS, fill);
    frame(FAMILY, 0x2, 9, WG_CMD_GET_DEVICE, WG_GENL_VERSION, attrs)
}

fn decode(datagram: &[u8]) -> Result<WgDevice, NetlinkError> {
    decode_device(messages(datagram).next().unwrap().unwrap())
}

#[test]
fn a_device_dump_decodes_and_drops_the_private_key() {
    let wanted = peer();
    let datagram = device_message(|peers| {
        peers.nest(0, |p| {
            p.put(WGPEER_A_PUBLIC_KEY, &wanted.public_key);
            p.put(WGPEER_A_ENDPOINT, &sockaddr(wanted.endpoint.unwrap()));
            p.nest(WGPEER_A_ALLOWEDIPS, |ips| ips.nest(0, |ip| allowed_ip(ip, &wanted.allowed_ips[0])));
        })
    });
    let device = decode(&datagram).unwrap();
    assert_eq!(device.public_key, Some([0x44; KEY_LEN]));
    assert_eq!(device.listen_port, 51820);
    assert_eq!(device.peers, vec![wanted]);
    assert!(!format!("{device:?}").contains("153"), "0x99, the private key's bytes, kept: {device:?}");
}

#[test]
fn malformed_answers_are_errors_not_panics() {
    let short_key = device_message(|peers| peers.nest(0, |p| p.put(WGPEER_A_PUBLIC_KEY, &[1; 31])));
    assert!(decode(&short_key).unwrap_err().to_string().contains("31 bytes"));
    let keyless = device_message(|peers| peers.nest(0, |p| p.put(WGPEER_A_FLAGS, &0u32.to_ne_bytes())));
    assert!(decode(&keyless).unwrap_err().to_string().contains("without a public key"));
    let bad_ip = device_message(|peers| {
        peers.nest(0, |p| {
            p.put(WGPEER_A_PUBLIC_KEY, &[1; 32]);
            p.nest(WGPEER_A_ALLOWEDIPS, |ips| {
                ips.nest(0, |ip| {
                    ip.put(WGALLOWEDIP_A_IPADDR, &[10, 0, 0, 0]);
                    ip.put(WGALLOWEDIP_A_CIDR_MASK, &[33]);
                })
            });
        })
    });
    assert!(decode(&bad_ip).is_err());
    assert!(decode_sockaddr(&[2, 0, 1]).is_err());
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
    let datagram = frame(GENL_ID_CTRL, 0, 3, 1, 2, attrs);
    assert_eq!(decode_family_id(messages(&datagram).next().unwrap().unwrap()).unwrap(), 0x1b);
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
