//! DHCPv4 options the client reads and writes (RFC 2132, RFC 3397 for 119, RFC 3442 for
//! 121), as typed values. Every decoder takes untrusted bytes and returns `None` (or skips
//! the broken part) rather than panicking.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

pub const SUBNET_MASK: u8 = 1;
pub const ROUTERS: u8 = 3;
pub const DNS_SERVERS: u8 = 6;
pub const HOSTNAME: u8 = 12;
pub const DOMAIN_NAME: u8 = 15;
pub const INTERFACE_MTU: u8 = 26;
pub const STATIC_ROUTES: u8 = 33;
pub const REQUESTED_IP: u8 = 50;
pub const LEASE_TIME: u8 = 51;
pub const MESSAGE_TYPE: u8 = 53;
pub const SERVER_ID: u8 = 54;
pub const PARAMETER_REQUEST_LIST: u8 = 55;
pub const MESSAGE: u8 = 56;
pub const RENEWAL_TIME: u8 = 58;
pub const REBINDING_TIME: u8 = 59;
pub const CLIENT_ID: u8 = 61;
pub const DOMAIN_SEARCH: u8 = 119;
pub const CLASSLESS_ROUTES: u8 = 121;

/// What the client asks for when a config has no `request` list (or it does not set
/// `skipDefault`): what the result needs.
pub const DEFAULT_REQUESTED: [u8; 10] = [
    SUBNET_MASK,
    ROUTERS,
    DNS_SERVERS,
    DOMAIN_NAME,
    INTERFACE_MTU,
    STATIC_ROUTES,
    RENEWAL_TIME,
    REBINDING_TIME,
    DOMAIN_SEARCH,
    CLASSLESS_ROUTES,
];

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageType {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Decline = 4,
    Ack = 5,
    Nak = 6,
    Release = 7,
    Inform = 8,
}

impl MessageType {
    pub fn from_byte(b: u8) -> Option<MessageType> {
        use MessageType::*;
        Some(match b {
            1 => Discover,
            2 => Offer,
            3 => Request,
            4 => Decline,
            5 => Ack,
            6 => Nak,
            7 => Release,
            8 => Inform,
            _ => return None,
        })
    }
}

pub fn ipv4(bytes: &[u8]) -> Option<Ipv4Addr> {
    <[u8; 4]>::try_from(bytes).ok().map(Ipv4Addr::from)
}

/// A list of addresses (options 3, 6); trailing bytes that are not a whole address are
/// ignored.
pub fn ipv4_list(bytes: &[u8]) -> Vec<Ipv4Addr> {
    bytes.chunks_exact(4).filter_map(ipv4).collect()
}

pub fn u32_value(bytes: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(bytes).ok().map(u32::from_be_bytes)
}

pub fn u16_value(bytes: &[u8]) -> Option<u16> {
    <[u8; 2]>::try_from(bytes).ok().map(u16::from_be_bytes)
}

/// A text option (12, 15): NUL padding some servers add is dropped; invalid UTF-8 is none.
pub fn text(bytes: &[u8]) -> Option<String> {
    let trimmed = bytes.split(|b| *b == 0).next().unwrap_or_default();
    std::str::from_utf8(trimmed).ok().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The prefix length of a subnet mask; `None` for a non-contiguous mask.
pub fn mask_prefix(mask: Ipv4Addr) -> Option<u8> {
    let bits = u32::from(mask);
    let len = bits.leading_ones();
    (bits.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
}

/// Option 121 (RFC 3442): a destination as a width byte and the significant octets, then a
/// router. Parsing stops at the first malformed entry (the rest cannot be framed).
pub fn classless_routes(bytes: &[u8]) -> Vec<(Ipv4Net, Ipv4Addr)> {
    let mut routes = Vec::new();
    let mut rest = bytes;
    while let Some((&width, tail)) = rest.split_first() {
        if width > 32 {
            break;
        }
        let significant = usize::from(width).div_ceil(8);
        if tail.len() < significant + 4 {
            break;
        }
        let mut dest = [0u8; 4];
        dest[..significant].copy_from_slice(&tail[..significant]);
        let Some(router) = ipv4(&tail[significant..significant + 4]) else { break };
        if let Ok(net) = Ipv4Net::new(Ipv4Addr::from(dest), width) {
            routes.push((net.trunc(), router));
        }
        rest = &tail[significant + 4..];
    }
    routes
}

pub fn encode_classless_routes(routes: &[(Ipv4Net, Ipv4Addr)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (net, router) in routes {
        let significant = usize::from(net.prefix_len()).div_ceil(8);
        out.push(net.prefix_len());
        out.extend_from_slice(&net.network().octets()[..significant]);
        out.extend_from_slice(&router.octets());
    }
    out
}

/// Option 33 (RFC 2132 section 5.8): host routes as (destination, router) pairs. The
/// destination's prefix is its class's, as the RFC says; a default destination is illegal
/// there and skipped.
pub fn static_routes(bytes: &[u8]) -> Vec<(Ipv4Net, Ipv4Addr)> {
    bytes
        .chunks_exact(8)
        .filter_map(|pair| {
            let dest = ipv4(&pair[..4])?;
            let router = ipv4(&pair[4..])?;
            if dest.is_unspecified() {
                return None;
            }
            let first = dest.octets()[0];
            let classful = match first {
                0..=127 => 8,
                128..=191 => 16,
                192..=223 => 24,
                _ => 32,
            };
            // A destination with bits beyond its class's mask is a host route.
            let net = Ipv4Net::new(dest, classful).ok()?;
            let prefix = if net.network() == dest { classful } else { 32 };
            Some((Ipv4Net::new(dest, prefix).ok()?, router))
        })
        .collect()
}

/// At most this many DNS servers and search domains are kept from a server's answer, v4
/// or v6 (resolv.conf's own limits are 3 and 6; a few more leave room for a runtime that
/// merges).
pub const MAX_DNS_SERVERS: usize = 8;
pub const MAX_SEARCH: usize = 8;

/// A domain name as resolv.conf can hold it: letters, digits, `-`, `_` and dots, labels of
/// 1-63 bytes, at most 253 in all. Anything else (spaces, newlines, NULs) would let a DHCP
/// server write other resolver settings into the container.
pub fn is_plain_domain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| !l.is_empty() && l.len() <= 63)
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Option 15, the domain name: text, kept only when it is a plain domain name.
pub fn domain_name(bytes: &[u8]) -> Option<String> {
    text(bytes).filter(|name| is_plain_domain(name))
}

/// The search list of option 119 (v4, RFC 3397) or 24 (v6, RFC 3646): DNS names in wire
/// format, with compression pointers that may point anywhere earlier in the option.
/// Pointer loops and overruns end that name; only plain domain names are kept, at most
/// [`MAX_SEARCH`].
pub fn domain_search(bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() && names.len() < MAX_SEARCH {
        let Some((name, next)) = read_name(bytes, pos) else { break };
        if is_plain_domain(&name) {
            names.push(name);
        }
        pos = next;
    }
    names
}

/// Reads the name starting at `start`; returns it and where the next name starts.
fn read_name(bytes: &[u8], start: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut pos = start;
    let mut next = None;
    // Each pointer must go backwards, so at most len(bytes) jumps can happen; this bound
    // also ends loops.
    let mut jumps = 0;
    loop {
        let len = *bytes.get(pos)?;
        match len {
            0 => {
                let end = next.unwrap_or(pos + 1);
                return Some((labels.join("."), end));
            }
            l if l & 0xc0 == 0xc0 => {
                let low = *bytes.get(pos + 1)?;
                let target = (usize::from(l & 0x3f) << 8) | usize::from(low);
                next.get_or_insert(pos + 2);
                jumps += 1;
                if target >= pos || jumps > bytes.len() {
                    return None;
                }
                pos = target;
            }
            l if l & 0xc0 == 0 => {
                let label = bytes.get(pos + 1..pos + 1 + usize::from(l))?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                pos += 1 + usize::from(l);
            }
            _ => return None,
        }
    }
}

/// Encodes names for option 119 (no compression: a client rarely sends it; tests use it).
pub fn encode_domain_search(names: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in names {
        for label in name.split('.').filter(|l| !l.is_empty()) {
            let label = &label.as_bytes()[..label.len().min(63)];
            out.push(label.len() as u8);
            out.extend_from_slice(label);
        }
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn classless_routes_rfc3442_examples() {
        let bytes =
            [0, 10, 0, 0, 1, 8, 10, 10, 0, 0, 2, 24, 192, 168, 7, 10, 0, 0, 3, 32, 1, 2, 3, 4, 10, 0, 0, 4];
        let routes = classless_routes(&bytes);
        assert_eq!(
            routes,
            [
                (net("0.0.0.0/0"), Ipv4Addr::new(10, 0, 0, 1)),
                (net("10.0.0.0/8"), Ipv4Addr::new(10, 0, 0, 2)),
                (net("192.168.7.0/24"), Ipv4Addr::new(10, 0, 0, 3)),
                (net("1.2.3.4/32"), Ipv4Addr::new(10, 0, 0, 4)),
            ]
        );
        assert_eq!(encode_classless_routes(&routes), bytes);
        // A broken tail leaves the good head.
        assert_eq!(classless_routes(&bytes[..7]).len(), 1);
        assert!(classless_routes(&[33, 1, 2, 3, 4, 5, 6, 7, 8]).is_empty());
    }

    #[test]
    fn static_routes_use_classful_or_host_prefixes() {
        let bytes = [10, 0, 0, 0, 192, 168, 0, 1, 172, 16, 3, 4, 192, 168, 0, 2, 0, 0, 0, 0, 1, 1, 1, 1, 9];
        assert_eq!(
            static_routes(&bytes),
            [
                (net("10.0.0.0/8"), Ipv4Addr::new(192, 168, 0, 1)),
                (net("172.16.3.4/32"), Ipv4Addr::new(192, 168, 0, 2))
            ]
        );
    }

    #[test]
    fn masks() {
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 255, 255, 0)), Some(24));
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 255, 255, 255)), Some(32));
        assert_eq!(mask_prefix(Ipv4Addr::new(0, 0, 0, 0)), Some(0));
        assert_eq!(mask_prefix(Ipv4Addr::new(255, 0, 255, 0)), None);
    }

    #[test]
    fn domain_search_with_compression() {
        // "eng.apple.com", "marketing.apple.com" with a pointer to "apple.com" (RFC 3397).
        let mut bytes = encode_domain_search(&["eng.apple.com"]);
        bytes.extend_from_slice(&[9]);
        bytes.extend_from_slice(b"marketing");
        bytes.extend_from_slice(&[0xc0, 4]);
        assert_eq!(domain_search(&bytes), ["eng.apple.com", "marketing.apple.com"]);
        // Pointer to itself / forwards: dropped, no hang.
        assert!(domain_search(&[0xc0, 0]).is_empty());
        assert!(domain_search(&[0xc0, 5, 0]).is_empty());
        assert!(domain_search(&[3, b'a']).is_empty());
    }

    #[test]
    fn text_and_numbers() {
        assert_eq!(text(b"example.org\0\0"), Some("example.org".into()));
        assert_eq!(text(b"\0"), None);
        assert_eq!(text(&[0xff, 0xfe]), None);
        assert_eq!(u32_value(&[0, 0, 1, 0]), Some(256));
        assert_eq!(u32_value(&[0, 0, 1]), None);
        assert_eq!(u16_value(&[5, 220]), Some(1500));
        assert_eq!(
            ipv4_list(&[1, 1, 1, 1, 8, 8, 8, 8, 9]),
            [Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(8, 8, 8, 8)]
        );
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = classless_routes(&bytes);
            let _ = static_routes(&bytes);
            let _ = domain_search(&bytes);
            let _ = text(&bytes);
            let _ = ipv4_list(&bytes);
        }

        #[test]
        fn classless_routes_round_trip(raw in proptest::collection::vec((any::<u32>(), 0u8..=32, any::<u32>()), 0..20)) {
            let routes: Vec<_> = raw
                .into_iter()
                .map(|(d, w, r)| (Ipv4Net::new(Ipv4Addr::from(d), w).unwrap().trunc(), Ipv4Addr::from(r)))
                .collect();
            prop_assert_eq!(classless_routes(&encode_classless_routes(&routes)), routes);
        }
    }
}
