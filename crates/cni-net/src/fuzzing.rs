//! Entry points for the fuzz targets in `fuzz/` (not an API: hidden from the docs and free
//! to change). They run the same decoders a dump runs on what the kernel sends, on bytes
//! that did not come from a kernel, so a malformed or hostile datagram can only be an
//! error, never a panic or a hang.

use crate::netlink::tc::{Qdisc, TcFilter};
use crate::netlink::{decode_message, IpAddress, Link, Neighbour, Route, Rule};
use crate::nft::{conntrack, ChainInfo, Incoming, ListedRule, TableInfo};
use crate::transport::message::messages;
use netlink_packet_route::RouteNetlinkMessage;

/// Decodes an rtnetlink datagram as the dumps of links, addresses, routes, rules,
/// neighbours, qdiscs and filters do, after reading each header and any ack or error.
/// Returns how many messages decoded into one of our types.
pub fn rtnetlink_datagram(datagram: &[u8]) -> usize {
    let mut decoded = 0;
    for message in messages(datagram) {
        let Ok(message) = message else { break };
        let _ = message.interrupted();
        if message.status().is_some() {
            continue;
        }
        let Ok(body) = decode_message(message) else { continue };
        let known = match &body {
            RouteNetlinkMessage::NewLink(m) | RouteNetlinkMessage::DelLink(m) => {
                Link::from_message(m);
                true
            }
            RouteNetlinkMessage::NewAddress(m) => IpAddress::from_message(m).is_some(),
            RouteNetlinkMessage::NewRoute(m) => Route::from_message(m).is_some(),
            RouteNetlinkMessage::NewRule(m) => Rule::from_message(m).is_some(),
            RouteNetlinkMessage::NewNeighbour(m) => Neighbour::from_message(m).is_some(),
            RouteNetlinkMessage::NewQueueDiscipline(m) => {
                Qdisc::from_message(m);
                true
            }
            RouteNetlinkMessage::NewTrafficFilter(m) => {
                TcFilter::from_message(m);
                true
            }
            _ => false,
        };
        decoded += usize::from(known);
    }
    decoded
}

/// Decodes an nfnetlink datagram with every decoder of nf_tables and ctnetlink answers
/// (table, chain and rule listings, conntrack entries), after reading each header and any
/// ack or error. Each decoder sees every message: they must refuse what is not theirs.
/// Returns how many decodings succeeded.
pub fn nfnetlink_datagram(datagram: &[u8]) -> usize {
    let mut decoded = 0;
    for message in messages(datagram) {
        let Ok(message) = message else { break };
        if message.status().is_some() {
            continue;
        }
        let incoming = Incoming::from(message);
        let _ = incoming.family();
        decoded += usize::from(TableInfo::decode(&incoming).is_ok());
        decoded += usize::from(ChainInfo::decode(&incoming).is_ok());
        decoded += usize::from(ListedRule::decode(&incoming).is_ok());
        decoded += usize::from(conntrack::parse_entry(incoming).is_ok());
    }
    decoded
}
