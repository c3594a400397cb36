//! Conntrack entry removal over ctnetlink (`NFNL_SUBSYS_CTNETLINK`).
//!
//! After a port mapping changes, UDP "connections" to the old host port stay in the
//! conntrack table and keep sending packets to the old container until they time out.
//! [`ConntrackClient::delete_matching`] removes exactly those entries: it reads the table
//! (optionally one address family), picks entries whose *original* direction matches the
//! protocol and destination port, and deletes each by its original tuple.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::attr::{Attr, AttrWriter};
use super::data::Family;
use super::error::NftError;
use super::msg::{put_message, Incoming};
use super::socket::{decode_failure, NetfilterConversation};
use super::sys::*;
use crate::Idempotent;

const fn ct_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_CTNETLINK << 8) | msg
}

/// One conntrack entry, as seen in its original direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackEntry {
    /// IP protocol number (17 for UDP).
    pub protocol: u8,
    /// Original source address.
    pub src: IpAddr,
    /// Original destination address.
    pub dst: IpAddr,
    /// Original source port (0 for protocols without ports).
    pub src_port: u16,
    /// Original destination port.
    pub dst_port: u16,
    /// Conntrack zone.
    pub zone: u16,
    /// The original-tuple attribute as the kernel sent it, replayed to delete the entry.
    tuple: Vec<u8>,
}

/// A ctnetlink client bound to the network namespace of the thread that created it.
#[derive(Debug)]
pub struct ConntrackClient {
    sock: NetfilterConversation,
}

impl ConntrackClient {
    /// Opens a client for the calling thread's current network namespace.
    pub fn new() -> Result<Self, NftError> {
        Ok(Self { sock: NetfilterConversation::open()? })
    }

    /// Every entry of `family` (`Ipv4`, `Ipv6`, or `Inet` for both).
    pub fn list(&mut self, family: Family) -> Result<Vec<ConntrackEntry>, NftError> {
        let l3 = match family {
            Family::Inet => 0, // AF_UNSPEC: all
            other => other.byte(),
        };
        let msg_type = ct_type(IPCTNL_MSG_CT_GET);
        self.sock
            .conversation
            .dump(
                |seq| {
                    let mut out = Vec::new();
                    put_message(&mut out, msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, l3, 0, &[]);
                    out
                },
                |message| parse_entry(message.into()).map_err(decode_failure),
            )
            .map_err(|err| NftError::from_netlink("list conntrack", err))
    }

    /// Deletes one entry. An entry that is already gone is not an error.
    pub fn delete(&mut self, entry: &ConntrackEntry) -> Result<(), NftError> {
        let family = match entry.src {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        };
        let mut w = AttrWriter::new();
        w.buf.extend_from_slice(&entry.tuple);
        if entry.zone != 0 {
            w.put(CTA_ZONE, &entry.zone.to_be_bytes());
        }
        let msg_type = ct_type(IPCTNL_MSG_CT_DELETE);
        let deleted = self.sock.conversation.request(
            |seq| {
                let mut out = Vec::new();
                put_message(&mut out, msg_type, NLM_F_REQUEST | NLM_F_ACK, seq, family.byte(), 0, &w.buf);
                out
            },
            |_| Ok(()),
        );
        deleted
            .map_err(|err| NftError::from_netlink("delete conntrack entry", err))
            .ignore_missing()
            .map(drop)
    }

    /// Deletes every entry of `family` whose original direction is `protocol` to
    /// destination port `dst_port` (e.g. UDP to a host port); returns how many went.
    pub fn delete_matching(
        &mut self,
        family: Family,
        protocol: u8,
        dst_port: u16,
    ) -> Result<usize, NftError> {
        let doomed: Vec<ConntrackEntry> = self
            .list(family)?
            .into_iter()
            .filter(|e| e.protocol == protocol && e.dst_port == dst_port)
            .collect();
        for entry in &doomed {
            self.delete(entry)?;
        }
        Ok(doomed.len())
    }
}

/// The original tuple of one listed entry (`None` for an entry without one).
pub(crate) fn parse_entry(message: Incoming<'_>) -> Result<Option<ConntrackEntry>, NftError> {
    let mut tuple = None;
    let mut zone = 0;
    for attr in message.attrs() {
        let attr = attr?;
        match attr.kind {
            CTA_TUPLE_ORIG => tuple = Some(attr),
            CTA_ZONE => zone = be16(&attr)?,
            _ => {}
        }
    }
    tuple.map(|tuple| parse_tuple(&tuple, message.family(), zone)).transpose()
}

fn be16(attr: &Attr<'_>) -> Result<u16, NftError> {
    let bytes: [u8; 2] = attr
        .payload
        .get(..2)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| NftError::Malformed("short 16-bit attribute".into()))?;
    Ok(u16::from_be_bytes(bytes))
}

fn parse_tuple(tuple: &Attr<'_>, family: u8, zone: u16) -> Result<ConntrackEntry, NftError> {
    let unspecified = if family == Family::Ipv6.byte() {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let mut entry = ConntrackEntry {
        protocol: 0,
        src: unspecified,
        dst: unspecified,
        src_port: 0,
        dst_port: 0,
        zone,
        tuple: Vec::new(),
    };
    for part in tuple.nested() {
        let part = part?;
        match part.kind {
            CTA_TUPLE_IP => {
                for ip in part.nested() {
                    let ip = ip?;
                    let addr = match ip.kind {
                        CTA_IP_V4_SRC | CTA_IP_V4_DST => {
                            let o: [u8; 4] = ip.payload.try_into().map_err(|_| bad("IPv4 address"))?;
                            IpAddr::V4(o.into())
                        }
                        CTA_IP_V6_SRC | CTA_IP_V6_DST => {
                            let o: [u8; 16] = ip.payload.try_into().map_err(|_| bad("IPv6 address"))?;
                            IpAddr::V6(o.into())
                        }
                        _ => continue,
                    };
                    if matches!(ip.kind, CTA_IP_V4_SRC | CTA_IP_V6_SRC) {
                        entry.src = addr;
                    } else {
                        entry.dst = addr;
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for p in part.nested() {
                    let p = p?;
                    match p.kind {
                        CTA_PROTO_NUM => {
                            entry.protocol = *p.payload.first().ok_or_else(|| bad("protocol"))?
                        }
                        CTA_PROTO_SRC_PORT => entry.src_port = be16(&p)?,
                        CTA_PROTO_DST_PORT => entry.dst_port = be16(&p)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // Replayed verbatim in the delete request: re-wrap the nest with the same content.
    let mut w = AttrWriter::new();
    w.nest(CTA_TUPLE_ORIG, |w| w.buf.extend_from_slice(tuple.payload));
    entry.tuple = w.buf;
    Ok(entry)
}

fn bad(what: &str) -> NftError {
    NftError::Malformed(format!("conntrack tuple has a malformed {what}"))
}
