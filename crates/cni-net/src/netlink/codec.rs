//! Framing: requests to bytes, datagrams from the kernel to typed replies.
//!
//! The netlink header of each reply is read by hand (it is four fixed fields), so that a
//! message whose body the packet crate cannot decode still has its sequence number and type
//! known, and the conversation can continue.

use netlink_packet_core::{
    NetlinkMessage, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK_TLVS, NLM_F_CAPPED,
    NLM_F_DUMP_INTR,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::NetlinkError;

const HEADER_LEN: usize = 16;
/// `NLMSGERR_ATTR_MSG`: the extended-ack human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// One decoded reply message.
#[derive(Debug)]
pub(crate) struct Reply {
    pub sequence: u32,
    /// `NLM_F_DUMP_INTR` was set: the dump this belongs to may be inconsistent.
    pub interrupted: bool,
    pub payload: ReplyPayload,
}

#[derive(Debug)]
pub(crate) enum ReplyPayload {
    Message(Box<RouteNetlinkMessage>),
    /// A message whose body could not be decoded.
    Undecodable(NetlinkError),
    /// `NLMSG_ERROR` with code 0.
    Ack,
    /// `NLMSG_ERROR` with a non-zero code, or `NLMSG_DONE` carrying an error.
    Error(NetlinkError),
    /// End of a dump.
    Done,
}

/// Serialises a request.
pub(crate) fn encode_request(message: RouteNetlinkMessage, flags: u16, sequence: u32) -> Vec<u8> {
    let mut packet = NetlinkMessage::from(message);
    packet.header.flags = flags;
    packet.header.sequence_number = sequence;
    packet.finalize();
    let mut bytes = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut bytes);
    bytes
}

/// Splits one datagram into its messages.
pub(crate) fn decode_datagram(datagram: &[u8]) -> Result<Vec<Reply>, NetlinkError> {
    let mut replies = Vec::new();
    let mut offset = 0;
    while offset + HEADER_LEN <= datagram.len() {
        let rest = &datagram[offset..];
        let length = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        if length < HEADER_LEN || length > rest.len() {
            return Err(NetlinkError::Decode(format!(
                "bad message length {length} with {} bytes left",
                rest.len()
            )));
        }
        let message = &rest[..length];
        let message_type = u16::from_ne_bytes(message[4..6].try_into().expect("2 bytes"));
        let flags = u16::from_ne_bytes(message[6..8].try_into().expect("2 bytes"));
        let sequence = u32::from_ne_bytes(message[8..12].try_into().expect("4 bytes"));
        let body = &message[HEADER_LEN..];
        let payload = match message_type {
            NLMSG_NOOP => None,
            NLMSG_OVERRUN => Some(ReplyPayload::Error(NetlinkError::Unexpected(
                "NLMSG_OVERRUN: the kernel dropped messages".into(),
            ))),
            NLMSG_ERROR => Some(decode_error(body, flags)?),
            NLMSG_DONE => Some(decode_done(body)),
            _ => Some(match NetlinkMessage::<RouteNetlinkMessage>::deserialize(message) {
                Ok(packet) => match packet.payload {
                    netlink_packet_core::NetlinkPayload::InnerMessage(inner) => {
                        ReplyPayload::Message(Box::new(inner))
                    }
                    other => ReplyPayload::Undecodable(NetlinkError::Unexpected(format!("{other:?}"))),
                },
                Err(err) => ReplyPayload::Undecodable(NetlinkError::Decode(format!(
                    "message type {message_type}: {err}"
                ))),
            }),
        };
        if let Some(payload) = payload {
            replies.push(Reply { sequence, interrupted: flags & NLM_F_DUMP_INTR != 0, payload });
        }
        offset += align4(length);
    }
    Ok(replies)
}

fn decode_error(body: &[u8], flags: u16) -> Result<ReplyPayload, NetlinkError> {
    let Some(code) = body.get(0..4) else {
        return Err(NetlinkError::Decode("truncated NLMSG_ERROR".into()));
    };
    let code = i32::from_ne_bytes(code.try_into().expect("4 bytes"));
    if code == 0 {
        return Ok(ReplyPayload::Ack);
    }
    let echoed = &body[4..];
    let message = if flags & NLM_F_ACK_TLVS != 0 {
        // The echoed request is only its header when capped, else the whole request.
        let echoed_len = if flags & NLM_F_CAPPED != 0 {
            HEADER_LEN
        } else {
            echoed
                .get(0..4)
                .map(|len| u32::from_ne_bytes(len.try_into().expect("4 bytes")) as usize)
                .unwrap_or(HEADER_LEN)
        };
        echoed.get(align4(echoed_len)..).and_then(extended_ack_message)
    } else {
        None
    };
    Ok(ReplyPayload::Error(NetlinkError::Kernel { errno: code.saturating_neg(), message }))
}

fn decode_done(body: &[u8]) -> ReplyPayload {
    let code = body.get(0..4).map(|code| i32::from_ne_bytes(code.try_into().expect("4 bytes"))).unwrap_or(0);
    if code < 0 {
        ReplyPayload::Error(NetlinkError::Kernel {
            errno: -code,
            message: body.get(4..).and_then(extended_ack_message),
        })
    } else {
        ReplyPayload::Done
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

fn align4(length: usize) -> usize {
    (length + 3) & !3
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builders for synthetic kernel replies.

    use super::*;

    pub(crate) fn header(length: usize, message_type: u16, flags: u16, sequence: u32) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_LEN);
        bytes.extend_from_slice(&(length as u32).to_ne_bytes());
        bytes.extend_from_slice(&message_type.to_ne_bytes());
        bytes.extend_from_slice(&flags.to_ne_bytes());
        bytes.extend_from_slice(&sequence.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes
    }

    /// `NLMSG_ERROR` with `errno` (0 = ack) and an optional extended-ack message.
    pub(crate) fn error(sequence: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
        let mut body = (-errno).to_ne_bytes().to_vec();
        body.extend(header(HEADER_LEN, 16, 0, sequence)); // the capped echoed request
        let mut flags = NLM_F_CAPPED;
        if let Some(text) = text {
            flags |= NLM_F_ACK_TLVS;
            let mut value = text.as_bytes().to_vec();
            value.push(0);
            body.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
            body.extend(&value);
            while !body.len().is_multiple_of(4) {
                body.push(0);
            }
        }
        let mut bytes = header(HEADER_LEN + body.len(), NLMSG_ERROR, flags, sequence);
        bytes.extend(body);
        bytes
    }

    pub(crate) fn done(sequence: u32, flags: u16) -> Vec<u8> {
        let mut bytes = header(HEADER_LEN + 4, NLMSG_DONE, flags, sequence);
        bytes.extend_from_slice(&0i32.to_ne_bytes());
        bytes
    }

    /// A serialised kernel message (e.g. a `NewLink`) with the given header flags.
    pub(crate) fn message(message: RouteNetlinkMessage, flags: u16, sequence: u32) -> Vec<u8> {
        encode_request(message, flags, sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use netlink_packet_route::link::LinkMessage;

    #[test]
    fn ack_and_error_with_extended_message() {
        let mut datagram = error(7, 0, None);
        datagram.extend(error(8, libc::EEXIST, Some("File exists here")));
        let replies = decode_datagram(&datagram).unwrap();
        assert_eq!(replies.len(), 2);
        assert!(matches!(replies[0].payload, ReplyPayload::Ack));
        match &replies[1].payload {
            ReplyPayload::Error(NetlinkError::Kernel { errno, message }) => {
                assert_eq!(*errno, libc::EEXIST);
                assert_eq!(message.as_deref(), Some("File exists here"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(replies[1].sequence, 8);
    }

    #[test]
    fn dump_intr_flag_is_reported() {
        let mut datagram = message(RouteNetlinkMessage::NewLink(LinkMessage::default()), NLM_F_DUMP_INTR, 3);
        datagram.extend(done(3, NLM_F_DUMP_INTR));
        let replies = decode_datagram(&datagram).unwrap();
        assert_eq!(replies.len(), 2);
        assert!(replies.iter().all(|reply| reply.interrupted));
        assert!(matches!(replies[0].payload, ReplyPayload::Message(_)));
        assert!(matches!(replies[1].payload, ReplyPayload::Done));
    }

    #[test]
    fn truncated_datagram_is_an_error() {
        let mut datagram = error(1, 0, None);
        datagram.truncate(20);
        datagram[0] = 200; // claims more bytes than present
        assert!(decode_datagram(&datagram).is_err());
    }

    #[test]
    fn done_with_error_code_is_an_error() {
        let mut bytes = header(HEADER_LEN + 4, NLMSG_DONE, 0, 4);
        bytes.extend_from_slice(&(-libc::EINVAL).to_ne_bytes());
        let replies = decode_datagram(&bytes).unwrap();
        assert!(matches!(
            replies[0].payload,
            ReplyPayload::Error(NetlinkError::Kernel { errno: libc::EINVAL, .. })
        ));
    }
}
