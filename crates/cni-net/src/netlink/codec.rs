//! rtnetlink bodies: requests to bytes, and kernel messages to typed ones with
//! `netlink-packet-route`. Framing, acks and errors are [`crate::transport`]'s.

use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NetlinkSerializable};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::NetlinkError;
use crate::transport::Message;

/// Serialises a request.
pub(crate) fn encode_request(message: RouteNetlinkMessage, flags: u16, sequence: u32) -> Vec<u8> {
    encode_packet(NetlinkMessage::from(message), flags, sequence)
}

/// A whole netlink message with `flags` and `sequence` in its header, as bytes (rtnetlink
/// requests here, generic-netlink ones for WireGuard).
pub(crate) fn encode_packet<I: NetlinkSerializable>(
    mut packet: NetlinkMessage<I>,
    flags: u16,
    sequence: u32,
) -> Vec<u8> {
    packet.header.flags = flags;
    packet.header.sequence_number = sequence;
    packet.finalize();
    let mut bytes = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut bytes);
    bytes
}

/// Decodes one rtnetlink message (not an ack, error or end of dump: the loop takes those).
pub(crate) fn decode_message(message: Message<'_>) -> Result<RouteNetlinkMessage, NetlinkError> {
    match NetlinkMessage::<RouteNetlinkMessage>::deserialize(message.bytes) {
        Ok(packet) => match packet.payload {
            NetlinkPayload::InnerMessage(inner) => Ok(inner),
            other => Err(NetlinkError::Unexpected(format!("{other:?}"))),
        },
        Err(err) => Err(NetlinkError::Decode(format!("message type {}: {err}", message.kind))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::message::messages;
    use netlink_packet_route::link::{LinkAttribute, LinkMessage};

    #[test]
    fn link_message_round_trips() {
        let mut link = LinkMessage::default();
        link.attributes.push(LinkAttribute::IfName("cnt0".into()));
        let bytes = encode_request(RouteNetlinkMessage::NewLink(link.clone()), 0, 5);
        let message = messages(&bytes).next().unwrap().unwrap();
        assert_eq!(message.seq, 5);
        assert_eq!(decode_message(message).unwrap(), RouteNetlinkMessage::NewLink(link));
    }

    #[test]
    fn undecodable_body_is_a_decode_error() {
        let bytes = crate::transport::testing::message(16, 0, 1, &[1, 2]); // RTM_NEWLINK, short body
        let message = messages(&bytes).next().unwrap().unwrap();
        assert!(matches!(decode_message(message), Err(NetlinkError::Decode(_))));
    }
}
