//! nfnetlink message framing: `nlmsghdr` + `nfgenmsg` + attributes, and the view of a
//! received message that the decoders read (framing of what the kernel sends back, acks
//! and errors are [`crate::transport`]'s).

use super::attr::{align4, AttrIter};
use super::sys::*;
use crate::transport::Message;

/// The nf_tables message type on the wire: subsystem in the high byte.
pub(crate) const fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

/// Appends one complete message to `out`.
pub(crate) fn put_message(
    out: &mut Vec<u8>,
    msg_type: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // port id: 0 addresses the kernel
    out.push(family);
    out.push(NFNETLINK_V0);
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(attrs);
    out.resize(align4(out.len()), 0);
}

/// The body of a message received from the kernel, as the nfnetlink decoders read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Incoming<'a> {
    /// Everything after the `nlmsghdr`.
    pub(crate) payload: &'a [u8],
}

impl<'a> From<Message<'a>> for Incoming<'a> {
    fn from(message: Message<'a>) -> Self {
        Incoming { payload: message.payload() }
    }
}

impl<'a> Incoming<'a> {
    /// The nfgenmsg family byte of an nfnetlink message.
    pub(crate) fn family(&self) -> u8 {
        self.payload.first().copied().unwrap_or(0)
    }

    /// The attributes after the nfgenmsg header.
    pub(crate) fn attrs(&self) -> AttrIter<'a> {
        AttrIter::new(self.payload.get(NFGENMSG_LEN..).unwrap_or_default())
    }
}

/// Splits a datagram into messages.
#[cfg(test)]
pub(crate) fn split_messages(buf: &[u8]) -> Result<Vec<Message<'_>>, crate::error::NetlinkError> {
    crate::transport::message::messages(buf).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let mut out = Vec::new();
        put_message(&mut out, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 7, 0, NFNL_SUBSYS_NFTABLES, &[]);
        let mut want = Vec::new();
        want.extend_from_slice(&20u32.to_ne_bytes());
        want.extend_from_slice(&0x10u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[0, 0, 0, 10]);
        assert_eq!(out, want);
        let parsed = split_messages(&out).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].seq, 7);
        assert_eq!(parsed[0].kind, NFNL_MSG_BATCH_BEGIN);
    }
}
