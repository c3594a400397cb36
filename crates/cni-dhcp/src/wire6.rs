//! DHCPv6 messages on the wire (RFC 8415 sections 8 and 21), the part a stateful IA_NA
//! client needs: the 4-byte header (type, 24-bit transaction id) and type-length-value
//! options, with IA_NA, IA Address and Status Code decoded into types.
//!
//! Hand-written rather than taken from `dhcproto`: that crate brings a whole DNS library
//! (hickory-proto) into the multicall binary for a format that is a header and a TLV list,
//! and the DNS names we read (option 24) already have a bounded decoder in
//! [`super::options::domain_search`]. As for v4, decoding never panics and never trusts a
//! length: anything that does not parse is an error the caller drops.

use std::net::Ipv6Addr;

pub const CLIENT_PORT: u16 = 546;
pub const SERVER_PORT: u16 = 547;
/// All_DHCP_Relay_Agents_and_Servers (RFC 8415 7.1): every client message goes here.
pub const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// Message types (RFC 8415 7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageType {
    Solicit = 1,
    Advertise = 2,
    Request = 3,
    Renew = 5,
    Rebind = 6,
    Reply = 7,
    Release = 8,
}

/// Option codes (RFC 8415 21, RFC 3646 for 23 and 24).
pub const OPT_CLIENT_ID: u16 = 1;
pub const OPT_SERVER_ID: u16 = 2;
pub const OPT_IA_NA: u16 = 3;
pub const OPT_IAADDR: u16 = 5;
pub const OPT_ORO: u16 = 6;
pub const OPT_ELAPSED_TIME: u16 = 8;
pub const OPT_STATUS_CODE: u16 = 13;
pub const OPT_DNS_SERVERS: u16 = 23;
pub const OPT_DOMAIN_LIST: u16 = 24;

/// Status codes (RFC 8415 21.13).
pub const STATUS_SUCCESS: u16 = 0;
pub const STATUS_NO_ADDRS_AVAIL: u16 = 2;
pub const STATUS_NO_BINDING: u16 = 3;

/// A DUID is at most 128 bytes plus its 2-byte type (RFC 8415 11.1).
pub const MAX_DUID_LEN: usize = 130;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message too short: {0} bytes")]
    TooShort(usize),
    #[error("option {code} runs past the end of its container")]
    TruncatedOption { code: u16 },
}

/// One DHCPv6 message; options keep their wire order (IA_NA may come more than once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: u8,
    /// 24 bits.
    pub xid: u32,
    pub options: Vec<(u16, Vec<u8>)>,
}

impl Message {
    pub fn new(kind: MessageType, xid: u32) -> Message {
        Message { kind: kind as u8, xid: xid & 0x00ff_ffff, options: Vec::new() }
    }

    pub fn option(&self, code: u16) -> Option<&[u8]> {
        self.options.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    pub fn push(&mut self, code: u16, value: Vec<u8>) {
        self.options.push((code, value));
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.push(self.kind);
        out.extend_from_slice(&self.xid.to_be_bytes()[1..]);
        encode_options(&self.options, &mut out);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        let [kind, a, b, c, rest @ ..] = bytes else { return Err(WireError::TooShort(bytes.len())) };
        Ok(Message { kind: *kind, xid: u32::from_be_bytes([0, *a, *b, *c]), options: decode_options(rest)? })
    }

    /// The IA_NA options the message carries (undecodable ones are skipped).
    pub fn ia_nas(&self) -> impl Iterator<Item = IaNa> + '_ {
        self.options.iter().filter(|(c, _)| *c == OPT_IA_NA).filter_map(|(_, v)| IaNa::decode(v))
    }

    /// The message-level status (absent means success).
    pub fn status(&self) -> Status {
        self.option(OPT_STATUS_CODE).map(Status::decode).unwrap_or_default()
    }
}

fn encode_options(options: &[(u16, Vec<u8>)], out: &mut Vec<u8>) {
    for (code, value) in options {
        out.extend_from_slice(&code.to_be_bytes());
        // Our own options are a few dozen bytes; nothing we send approaches 64 KiB.
        out.extend_from_slice(&(value.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
        out.extend_from_slice(&value[..value.len().min(usize::from(u16::MAX))]);
    }
}

/// Decodes a list of options (a message's, or the ones inside IA_NA / IAADDR).
pub fn decode_options(mut area: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, WireError> {
    let mut options = Vec::new();
    while !area.is_empty() {
        let [c0, c1, l0, l1, rest @ ..] = area else {
            return Err(WireError::TruncatedOption { code: area.first().map_or(0, |&b| u16::from(b) << 8) });
        };
        let code = u16::from_be_bytes([*c0, *c1]);
        let len = usize::from(u16::from_be_bytes([*l0, *l1]));
        if rest.len() < len {
            return Err(WireError::TruncatedOption { code });
        }
        let (value, rest) = rest.split_at(len);
        options.push((code, value.to_vec()));
        area = rest;
    }
    Ok(options)
}

/// A Status Code option: code and the server's text (kept short: it ends up in logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub code: u16,
    pub message: String,
}

/// The most of a server's status text we keep.
const MAX_STATUS_TEXT: usize = 200;

impl Status {
    fn decode(bytes: &[u8]) -> Status {
        match bytes {
            [a, b, text @ ..] => Status {
                code: u16::from_be_bytes([*a, *b]),
                message: String::from_utf8_lossy(&text[..text.len().min(MAX_STATUS_TEXT)])
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect(),
            },
            // A status option too short to hold a code is a failure of unknown kind.
            _ => Status { code: 1, message: String::new() },
        }
    }

    pub fn is_success(&self) -> bool {
        self.code == STATUS_SUCCESS
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.code {
            0 => "Success",
            1 => "UnspecFail",
            2 => "NoAddrsAvail",
            3 => "NoBinding",
            4 => "NotOnLink",
            5 => "UseMulticast",
            _ => "status",
        };
        write!(f, "{name} ({})", self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// An IA Address option (RFC 8415 21.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaAddr {
    pub address: Ipv6Addr,
    pub preferred: u32,
    pub valid: u32,
    pub status: Status,
}

impl IaAddr {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.address.octets().to_vec();
        out.extend_from_slice(&self.preferred.to_be_bytes());
        out.extend_from_slice(&self.valid.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<IaAddr> {
        let addr: [u8; 16] = bytes.get(..16)?.try_into().ok()?;
        let u32_at = |i: usize| Some(u32::from_be_bytes(bytes.get(i..i + 4)?.try_into().ok()?));
        let inner = decode_options(bytes.get(24..)?).ok()?;
        let status = inner.iter().find(|(c, _)| *c == OPT_STATUS_CODE).map(|(_, v)| Status::decode(v));
        Some(IaAddr {
            address: Ipv6Addr::from(addr),
            preferred: u32_at(16)?,
            valid: u32_at(20)?,
            status: status.unwrap_or_default(),
        })
    }
}

/// An Identity Association for Non-temporary Addresses (RFC 8415 21.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaNa {
    pub iaid: u32,
    pub t1: u32,
    pub t2: u32,
    pub addresses: Vec<IaAddr>,
    pub status: Status,
}

impl IaNa {
    /// The IA_NA a client sends: its IAID, T1 and T2 left to the server, and the address
    /// it holds or would like (if any).
    pub fn request(iaid: u32, address: Option<Ipv6Addr>) -> IaNa {
        IaNa {
            iaid,
            t1: 0,
            t2: 0,
            addresses: address
                .map(|address| IaAddr { address, preferred: 0, valid: 0, status: Status::default() })
                .into_iter()
                .collect(),
            status: Status::default(),
        }
    }

    /// The IA_NA a server grants: one address with its preferred and valid lifetimes, and
    /// when to renew (T1) and rebind (T2), all in seconds; every status a success.
    pub fn grant(iaid: u32, (t1, t2): (u32, u32), address: Ipv6Addr, (preferred, valid): (u32, u32)) -> IaNa {
        IaNa {
            iaid,
            t1,
            t2,
            addresses: vec![IaAddr { address, preferred, valid, status: Status::default() }],
            status: Status::default(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        for n in [self.iaid, self.t1, self.t2] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        let inner: Vec<(u16, Vec<u8>)> = self.addresses.iter().map(|a| (OPT_IAADDR, a.encode())).collect();
        encode_options(&inner, &mut out);
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<IaNa> {
        let u32_at = |i: usize| Some(u32::from_be_bytes(bytes.get(i..i + 4)?.try_into().ok()?));
        let inner = decode_options(bytes.get(12..)?).ok()?;
        let mut ia = IaNa {
            iaid: u32_at(0)?,
            t1: u32_at(4)?,
            t2: u32_at(8)?,
            addresses: Vec::new(),
            status: Status::default(),
        };
        for (code, value) in inner {
            match code {
                OPT_IAADDR => ia.addresses.extend(IaAddr::decode(&value)),
                OPT_STATUS_CODE => ia.status = Status::decode(&value),
                _ => {}
            }
        }
        Some(ia)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_with_an_ia_na() {
        let mut m = Message::new(MessageType::Request, 0x0012_3456);
        m.push(OPT_CLIENT_ID, vec![0, 4, 1, 2]);
        let ia = IaNa::request(7, Some("2001:db8::5".parse().unwrap()));
        m.push(OPT_IA_NA, ia.encode());
        m.push(OPT_ORO, vec![0, 23, 0, 24]);
        let bytes = m.encode();
        assert_eq!(&bytes[..4], &[3, 0x12, 0x34, 0x56]);
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.ia_nas().collect::<Vec<_>>(), [ia]);
    }

    #[test]
    fn nested_status_codes_are_read() {
        let mut addr = IaAddr {
            address: "2001:db8::9".parse().unwrap(),
            preferred: 10,
            valid: 20,
            status: Status::default(),
        }
        .encode();
        encode_options(&[(OPT_STATUS_CODE, b"\0\0ok".to_vec())], &mut addr);
        let mut ia = vec![0, 0, 0, 7, 0, 0, 0, 5, 0, 0, 0, 8];
        encode_options(&[(OPT_IAADDR, addr), (OPT_STATUS_CODE, b"\0\x03gone\n".to_vec())], &mut ia);
        let ia = IaNa::decode(&ia).unwrap();
        assert_eq!((ia.iaid, ia.t1, ia.t2), (7, 5, 8));
        assert_eq!(ia.addresses[0].valid, 20);
        assert_eq!(ia.status, Status { code: STATUS_NO_BINDING, message: "gone".into() });
        assert_eq!(ia.status.to_string(), "NoBinding (3): gone");
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert_eq!(Message::decode(&[7, 0, 0]), Err(WireError::TooShort(3)));
        assert_eq!(
            Message::decode(&[7, 0, 0, 1, 0, 2, 0, 9, 1]),
            Err(WireError::TruncatedOption { code: 2 })
        );
        assert!(Message::decode(&[7, 0, 0, 1, 0]).is_err());
        assert!(IaNa::decode(&[0; 11]).is_none());
        // An IA_NA whose inner options overrun is dropped, not half-read.
        assert!(IaNa::decode(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 40, 1]).is_none());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(m) = Message::decode(&bytes) {
                let _ = (m.ia_nas().count(), m.status());
                prop_assert_eq!(Message::decode(&m.encode()).unwrap(), m);
            }
        }
    }
}
