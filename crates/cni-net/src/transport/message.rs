//! Reading the kernel's datagrams: the `nlmsghdr` of each message, and what an
//! `NLMSG_ERROR` / `NLMSG_DONE` says (errno plus the extended-ack text).
//!
//! Only the header is read here, never the body of a protocol message: that is left to
//! the protocol (rtnetlink decodes it with `netlink-packet-route`, nfnetlink with its own
//! attribute reader), so the loop in [`super::conversation`] serves both.

use crate::error::NetlinkError;

pub(crate) const HEADER_LEN: usize = 16;

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLMSG_OVERRUN: u16 = 4;

#[cfg(test)]
pub(crate) const NLM_F_MULTIPART: u16 = 0x2;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
/// On `NLMSG_ERROR`: the echoed request is only its header (`NETLINK_CAP_ACK`).
pub(crate) const NLM_F_CAPPED: u16 = 0x100;
/// On `NLMSG_ERROR`: extended-ack attributes follow the echoed request.
pub(crate) const NLM_F_ACK_TLVS: u16 = 0x200;

/// `NLMSGERR_ATTR_MSG`: the extended ack's human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// One message of a datagram, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
    /// The whole message, header included (what `netlink-packet-route` parses).
    pub(crate) bytes: &'a [u8],
}

impl<'a> Message<'a> {
    /// Everything after the header.
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.bytes[HEADER_LEN..]
    }

    /// The dump this message belongs to may be inconsistent (the table changed meanwhile).
    pub(crate) fn interrupted(&self) -> bool {
        self.flags & NLM_F_DUMP_INTR != 0
    }

    /// For `NLMSG_ERROR`: `Ok(())` for an ack, the kernel's error otherwise. For
    /// `NLMSG_DONE`: `Ok(())`, or the error a dump ended with. `None` for anything else.
    pub(crate) fn status(&self) -> Option<Result<(), NetlinkError>> {
        let body = self.payload();
        match self.kind {
            NLMSG_ERROR => Some(match read_i32(body) {
                None => Err(NetlinkError::Decode("truncated NLMSG_ERROR".into())),
                Some(0) => Ok(()),
                Some(code) => Err(NetlinkError::Kernel {
                    errno: code.saturating_neg(),
                    message: self.error_text(&body[4..]),
                }),
            }),
            NLMSG_DONE => Some(match read_i32(body) {
                Some(code) if code < 0 => Err(NetlinkError::Kernel {
                    errno: code.saturating_neg(),
                    // NLMSG_DONE carries the attributes right after the code.
                    message: (self.flags & NLM_F_ACK_TLVS != 0)
                        .then(|| extended_ack_message(&body[4..]))
                        .flatten(),
                }),
                _ => Ok(()),
            }),
            NLMSG_OVERRUN => {
                Some(Err(NetlinkError::Unexpected("NLMSG_OVERRUN: the kernel dropped messages".into())))
            }
            _ => None,
        }
    }

    /// The extended-ack text after the request echoed in an `NLMSG_ERROR`.
    fn error_text(&self, echoed: &[u8]) -> Option<String> {
        if self.flags & NLM_F_ACK_TLVS == 0 {
            return None;
        }
        // The echoed request is only its header when capped, else the whole request.
        let echoed_len = if self.flags & NLM_F_CAPPED != 0 {
            HEADER_LEN
        } else {
            read_i32(echoed).map_or(HEADER_LEN, |len| len as u32 as usize)
        };
        echoed.get(align4(echoed_len)..).and_then(extended_ack_message)
    }
}

/// The messages of one datagram, without collecting them: a malformed length ends the
/// iteration with an error.
pub(crate) fn messages(datagram: &[u8]) -> Messages<'_> {
    Messages { rest: datagram }
}

pub(crate) struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, NetlinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        if rest.len() < HEADER_LEN {
            return None;
        }
        let length = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        if length < HEADER_LEN || length > rest.len() {
            self.rest = &[];
            return Some(Err(NetlinkError::Decode(format!(
                "bad message length {length} with {} bytes left",
                rest.len()
            ))));
        }
        self.rest = &rest[align4(length).min(rest.len())..];
        Some(Ok(Message {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32::from_ne_bytes(rest[8..12].try_into().expect("4 bytes")),
            bytes: &rest[..length],
        }))
    }
}

/// Finds `NLMSGERR_ATTR_MSG` in the extended-ack attributes.
fn extended_ack_message(mut attributes: &[u8]) -> Option<String> {
    while attributes.len() >= 4 {
        let length = u16::from_ne_bytes([attributes[0], attributes[1]]) as usize;
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]) & 0x3fff;
        if length < 4 || length > attributes.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &attributes[4..length];
            let text = text.split(|byte| *byte == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        attributes = attributes.get(align4(length)..)?;
    }
    None
}

fn read_i32(bytes: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?))
}

pub(crate) const fn align4(length: usize) -> usize {
    (length + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::super::testing::{done, error, header};
    use super::*;

    fn statuses(datagram: &[u8]) -> Vec<(u32, Option<Result<(), NetlinkError>>)> {
        messages(datagram).map(|m| m.unwrap()).map(|m| (m.seq, m.status())).collect()
    }

    #[test]
    fn ack_and_error_with_extended_message() {
        let mut datagram = error(7, 0, None);
        datagram.extend(error(8, libc::EEXIST, Some("File exists here")));
        let replies = statuses(&datagram);
        assert_eq!(replies.len(), 2);
        assert!(matches!(replies[0], (7, Some(Ok(())))));
        match &replies[1] {
            (8, Some(Err(NetlinkError::Kernel { errno, message }))) => {
                assert_eq!(*errno, libc::EEXIST);
                assert_eq!(message.as_deref(), Some("File exists here"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn dump_intr_flag_is_reported() {
        let datagram = done(3, NLM_F_DUMP_INTR);
        let message = messages(&datagram).next().unwrap().unwrap();
        assert!(message.interrupted());
        assert!(matches!(message.status(), Some(Ok(()))));
    }

    #[test]
    fn truncated_datagram_is_an_error() {
        let mut datagram = error(1, 0, None);
        datagram.truncate(20);
        datagram[0] = 200; // claims more bytes than present
        let mut all = messages(&datagram);
        assert!(all.next().unwrap().is_err());
        assert!(all.next().is_none());
    }

    #[test]
    fn done_with_error_code_is_an_error() {
        let mut bytes = header(HEADER_LEN + 4, NLMSG_DONE, 0, 4);
        bytes.extend_from_slice(&(-libc::EINVAL).to_ne_bytes());
        let replies = statuses(&bytes);
        assert!(matches!(replies[0].1, Some(Err(NetlinkError::Kernel { errno: libc::EINVAL, .. }))));
    }

    #[test]
    fn uncapped_error_skips_the_whole_echoed_request() {
        // An echoed request of 24 bytes (header + 8 bytes body), then the ext-ack TLV.
        let mut body = (-libc::EINVAL).to_ne_bytes().to_vec();
        body.extend(header(24, 16, 0, 9));
        body.extend([0u8; 8]);
        body.extend(&8u16.to_ne_bytes());
        body.extend(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        body.extend(b"bad\0");
        let mut bytes = header(HEADER_LEN + body.len(), NLMSG_ERROR, NLM_F_ACK_TLVS, 9);
        bytes.extend(body);
        match &statuses(&bytes)[0].1 {
            Some(Err(NetlinkError::Kernel { message, .. })) => assert_eq!(message.as_deref(), Some("bad")),
            other => panic!("unexpected {other:?}"),
        }
    }
}
