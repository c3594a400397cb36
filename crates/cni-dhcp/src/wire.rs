//! DHCPv4 messages on the wire (RFC 2131 section 2, RFC 2132 section 2-3).
//!
//! A message is the fixed 236-byte BOOTP header, the magic cookie and a list of options.
//! Decoding never panics and never trusts a length: everything a peer sends is bounds
//! checked, and anything that does not parse is an error the caller drops (a malformed
//! reply must not end a lease, let alone the daemon).

use std::net::Ipv4Addr;

/// BOOTP operation codes.
pub const BOOTREQUEST: u8 = 1;
pub const BOOTREPLY: u8 = 2;
/// The `flags` bit asking servers to broadcast their reply (RFC 2131 section 4.1).
pub const FLAG_BROADCAST: u16 = 0x8000;

const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
const HEADER_LEN: usize = 236;
/// Servers must accept messages of at least 576 bytes (RFC 2131 section 2): we pad to 300,
/// the smallest BOOTP message, since some relays drop shorter ones.
const MIN_MESSAGE_LEN: usize = 300;

const OPT_PAD: u8 = 0;
const OPT_END: u8 = 255;

/// Why bytes are not a DHCP message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message too short: {0} bytes")]
    TooShort(usize),
    #[error("no DHCP magic cookie")]
    NoMagicCookie,
    #[error("option {code} runs past the end of the message")]
    TruncatedOption { code: u8 },
}

/// One DHCPv4 message. Options keep their wire order; an option sent several times is
/// one entry with the values concatenated (RFC 3396), which is how long options such as
/// classless routes arrive split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub op: u8,
    pub htype: u8,
    pub hlen: u8,
    pub hops: u8,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: [u8; 16],
    pub options: Vec<(u8, Vec<u8>)>,
}

impl Message {
    /// A client request from an Ethernet interface with hardware address `mac`.
    pub fn request(xid: u32, mac: [u8; 6]) -> Message {
        let mut chaddr = [0u8; 16];
        chaddr[..6].copy_from_slice(&mac);
        Message {
            op: BOOTREQUEST,
            htype: 1,
            hlen: 6,
            hops: 0,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr,
            options: Vec::new(),
        }
    }

    /// The value of option `code`, if present.
    pub fn option(&self, code: u8) -> Option<&[u8]> {
        self.options.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    /// Sets option `code` (replacing an earlier value).
    pub fn set_option(&mut self, code: u8, value: Vec<u8>) {
        match self.options.iter_mut().find(|(c, _)| *c == code) {
            Some(entry) => entry.1 = value,
            None => self.options.push((code, value)),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MIN_MESSAGE_LEN + 64);
        out.extend_from_slice(&[self.op, self.htype, self.hlen, self.hops]);
        out.extend_from_slice(&self.xid.to_be_bytes());
        out.extend_from_slice(&self.secs.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        for addr in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            out.extend_from_slice(&addr.octets());
        }
        out.extend_from_slice(&self.chaddr);
        out.resize(HEADER_LEN, 0); // sname and file stay empty
        out.extend_from_slice(&MAGIC_COOKIE);
        for (code, value) in &self.options {
            if *code == OPT_PAD || *code == OPT_END {
                continue;
            }
            // Values over 255 bytes go out as several options of the same code (RFC 3396);
            // an empty value is still sent once (e.g. a zero-length client id is legal).
            let mut chunks = value.chunks(255).peekable();
            if chunks.peek().is_none() {
                out.extend_from_slice(&[*code, 0]);
            }
            for chunk in chunks {
                out.push(*code);
                out.push(chunk.len() as u8);
                out.extend_from_slice(chunk);
            }
        }
        out.push(OPT_END);
        if out.len() < MIN_MESSAGE_LEN {
            out.resize(MIN_MESSAGE_LEN, 0);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        if bytes.len() < HEADER_LEN + MAGIC_COOKIE.len() {
            return Err(WireError::TooShort(bytes.len()));
        }
        if bytes[HEADER_LEN..HEADER_LEN + 4] != MAGIC_COOKIE {
            return Err(WireError::NoMagicCookie);
        }
        let u32_at = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u16_at = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
        let mut chaddr = [0u8; 16];
        chaddr.copy_from_slice(&bytes[28..44]);
        Ok(Message {
            op: bytes[0],
            htype: bytes[1],
            hlen: bytes[2],
            hops: bytes[3],
            xid: u32_at(4),
            secs: u16_at(8),
            flags: u16_at(10),
            ciaddr: Ipv4Addr::from(u32_at(12)),
            yiaddr: Ipv4Addr::from(u32_at(16)),
            siaddr: Ipv4Addr::from(u32_at(20)),
            giaddr: Ipv4Addr::from(u32_at(24)),
            chaddr,
            options: decode_options(&bytes[HEADER_LEN + 4..])?,
        })
    }
}

/// Decodes an option area, concatenating repeated codes (RFC 3396). Bytes after the end
/// option are padding and ignored; a missing end option is tolerated (some servers omit it).
fn decode_options(mut area: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, WireError> {
    let mut options: Vec<(u8, Vec<u8>)> = Vec::new();
    while let Some((&code, rest)) = area.split_first() {
        match code {
            OPT_PAD => area = rest,
            OPT_END => break,
            _ => {
                let (&len, rest) = rest.split_first().ok_or(WireError::TruncatedOption { code })?;
                let len = usize::from(len);
                if rest.len() < len {
                    return Err(WireError::TruncatedOption { code });
                }
                let (value, rest) = rest.split_at(len);
                match options.iter_mut().find(|(c, _)| *c == code) {
                    Some(entry) => entry.1.extend_from_slice(value),
                    None => options.push((code, value.to_vec())),
                }
                area = rest;
            }
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_keeps_every_field() {
        let mut m = Message::request(0xdead_beef, [2, 0, 0, 0, 0, 1]);
        m.flags = FLAG_BROADCAST;
        m.ciaddr = Ipv4Addr::new(10, 0, 0, 5);
        m.set_option(53, vec![1]);
        m.set_option(61, vec![7; 300]); // split in two on the wire
        m.set_option(60, vec![]);
        let bytes = m.encode();
        assert!(bytes.len() >= MIN_MESSAGE_LEN);
        assert_eq!(Message::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn long_option_is_split_and_joined() {
        let mut m = Message::request(1, [0; 6]);
        m.set_option(121, (0..=255u8).chain(0..10).collect());
        let bytes = m.encode();
        let area = &bytes[HEADER_LEN + 4..];
        assert_eq!(&area[..2], &[121, 255]);
        assert_eq!(&area[257..259], &[121, 11]);
        assert_eq!(Message::decode(&bytes).unwrap().option(121).unwrap().len(), 266);
    }

    #[test]
    fn malformed_messages_are_errors() {
        assert_eq!(Message::decode(&[0; 10]), Err(WireError::TooShort(10)));
        assert_eq!(Message::decode(&[0; 300]), Err(WireError::NoMagicCookie));
        let mut bytes = Message::request(1, [0; 6]).encode();
        let end = HEADER_LEN + 4;
        bytes.truncate(end);
        bytes.extend_from_slice(&[51, 4, 0, 0]);
        assert_eq!(Message::decode(&bytes), Err(WireError::TruncatedOption { code: 51 }));
        bytes.truncate(end);
        bytes.push(51);
        assert_eq!(Message::decode(&bytes), Err(WireError::TruncatedOption { code: 51 }));
    }

    #[test]
    fn pad_and_missing_end_are_tolerated() {
        let mut bytes = Message::request(1, [0; 6]).encode();
        bytes.truncate(HEADER_LEN + 4);
        bytes.extend_from_slice(&[0, 0, 53, 1, 2]);
        assert_eq!(Message::decode(&bytes).unwrap().option(53), Some(&[2u8][..]));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn decoding_arbitrary_options_never_panics(opts in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut bytes = Message::request(1, [0; 6]).encode();
            bytes.truncate(HEADER_LEN + 4);
            bytes.extend_from_slice(&opts);
            if let Ok(m) = Message::decode(&bytes) {
                // Whatever decodes re-encodes and decodes to the same options.
                prop_assert_eq!(Message::decode(&m.encode()).unwrap().options, m.options);
            }
        }
    }
}
