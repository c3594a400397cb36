//! Netlink message framing: `nlmsghdr` + `nfgenmsg` + attributes, and parsing of what the
//! kernel sends back.

use super::attr::{align4, AttrIter};
use super::error::NftError;
use super::sys::*;

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

/// A message received from the kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Incoming<'a> {
    pub(crate) msg_type: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
    /// Everything after the `nlmsghdr`.
    pub(crate) payload: &'a [u8],
}

/// What an `NLMSG_ERROR` says: the errno (0 for an ACK) and which request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) errno: i32,
    pub(crate) request_seq: u32,
}

impl<'a> Incoming<'a> {
    pub(crate) fn ack(&self) -> Result<Option<Ack>, NftError> {
        if self.msg_type != NLMSG_ERROR {
            return Ok(None);
        }
        if self.payload.len() < 4 + NLMSG_HDRLEN {
            return Err(NftError::Malformed("short NLMSG_ERROR".into()));
        }
        let code = i32::from_ne_bytes(self.payload[0..4].try_into().expect("4 bytes"));
        let request_seq = u32::from_ne_bytes(self.payload[12..16].try_into().expect("4 bytes"));
        Ok(Some(Ack { errno: -code, request_seq }))
    }

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
pub(crate) fn split_messages(mut buf: &[u8]) -> Result<Vec<Incoming<'_>>, NftError> {
    let mut out = Vec::new();
    while buf.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(NftError::Malformed(format!("message claims {len} bytes")));
        }
        out.push(Incoming {
            msg_type: u16::from_ne_bytes([buf[4], buf[5]]),
            flags: u16::from_ne_bytes([buf[6], buf[7]]),
            seq: u32::from_ne_bytes(buf[8..12].try_into().expect("4 bytes")),
            payload: &buf[NLMSG_HDRLEN..len],
        });
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(out)
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
        assert_eq!(parsed[0].msg_type, NFNL_MSG_BATCH_BEGIN);
    }

    #[test]
    fn error_message_is_decoded() {
        let mut out = Vec::new();
        out.extend_from_slice(&36u32.to_ne_bytes());
        out.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&9u32.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&(-libc::EEXIST).to_ne_bytes());
        // the echoed request header: len, type, flags, seq, pid
        out.extend_from_slice(&20u32.to_ne_bytes());
        out.extend_from_slice(&nft_type(NFT_MSG_NEWTABLE).to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&5u32.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        let parsed = split_messages(&out).unwrap();
        let ack = parsed[0].ack().unwrap().unwrap();
        assert_eq!(ack, Ack { errno: libc::EEXIST, request_seq: 5 });
    }
}
