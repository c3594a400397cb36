//! Turning one query into a reply: answered from the network's records when the name is
//! ours, handed to the forwarder otherwise. Wire format is hickory-proto's; a message that
//! does not parse is answered FORMERR when it at least has a query header, else dropped.

use crate::zone::{Lookup, NetworkZone};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::net::IpAddr;

/// Our answers may change at any moment (a container stops): clients must not cache them.
pub const LOCAL_TTL: u32 = 0;
/// The UDP payload size we offer in EDNS (the DNS flag day 2020 value), and the most we
/// ever send over UDP whatever a client advertises: a datagram's source can be forged, so
/// a reply larger than this would let anyone who can send one aim our bytes at another.
pub const EDNS_PAYLOAD: u16 = 1232;
/// The most a client without EDNS takes over UDP (RFC 1035 4.2.1).
pub const PLAIN_UDP_PAYLOAD: u16 = 512;
const HEADER_LEN: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// What to do with a query.
#[derive(Debug)]
pub enum Outcome {
    Reply(Vec<u8>),
    /// Not ours: ask upstream (the parsed query comes along).
    Forward(Message),
    /// Not a query, or too broken to answer: say nothing.
    Drop,
}

/// The response skeleton for `query`: same id, opcode, RD and question.
fn response_to(query: &Message, code: ResponseCode) -> Message {
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    reply.add_queries(query.queries().iter().cloned());
    if query.extensions().is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        reply.set_edns(edns);
    }
    reply
}

/// The largest UDP reply `query` may get: 512 bytes without EDNS, else what the client
/// advertises, at least 512 and at most [`EDNS_PAYLOAD`].
pub fn udp_limit(query: &Message) -> usize {
    let advertised = query.extensions().as_ref().map_or(PLAIN_UDP_PAYLOAD, |edns| edns.max_payload());
    usize::from(advertised.clamp(PLAIN_UDP_PAYLOAD, EDNS_PAYLOAD))
}

/// Encodes `reply`; over UDP, one larger than [`udp_limit`] is sent as an empty truncated
/// answer (TC), and the client asks again over TCP (RFC 1035 4.2.1, RFC 7766), where the
/// handshake proves its address.
pub fn encode(query: &Message, reply: &Message, transport: Transport) -> Vec<u8> {
    let bytes = reply.to_vec().unwrap_or_else(|_| encode_error(query, ResponseCode::ServFail));
    if transport == Transport::Udp && bytes.len() > udp_limit(query) {
        let mut truncated = response_to(query, reply.response_code());
        truncated.set_authoritative(reply.authoritative()).set_truncated(true);
        return truncated.to_vec().unwrap_or_else(|_| encode_error(query, ResponseCode::ServFail));
    }
    bytes
}

pub fn encode_error(query: &Message, code: ResponseCode) -> Vec<u8> {
    let mut reply = Message::error_msg(query.id(), query.op_code(), code);
    reply.set_recursion_desired(query.recursion_desired()).set_recursion_available(true);
    reply.add_queries(query.queries().iter().cloned());
    reply.to_vec().unwrap_or_default()
}

/// FORMERR for bytes that do not parse but carry a query's header (id and QR=0).
fn format_error(bytes: &[u8]) -> Outcome {
    if bytes.len() < HEADER_LEN || bytes[2] & 0x80 != 0 {
        return Outcome::Drop;
    }
    let id = u16::from_be_bytes([bytes[0], bytes[1]]);
    match Message::error_msg(id, OpCode::Query, ResponseCode::FormErr).to_vec() {
        Ok(b) => Outcome::Reply(b),
        Err(_) => Outcome::Drop,
    }
}

/// Decides what to do with the bytes of one query received on `zone`'s address.
pub fn handle(zone: &NetworkZone, bytes: &[u8], transport: Transport) -> Outcome {
    let query = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => return format_error(bytes),
    };
    // Never answer a response: that is how reflection loops start.
    if query.message_type() != MessageType::Query {
        return Outcome::Drop;
    }
    if query.op_code() != OpCode::Query {
        return Outcome::Reply(encode_error(&query, ResponseCode::NotImp));
    }
    let [question] = query.queries() else {
        return Outcome::Reply(encode_error(&query, ResponseCode::FormErr));
    };
    match answer_locally(zone, &query, question) {
        Some(reply) => Outcome::Reply(encode(&query, &reply, transport)),
        None => Outcome::Forward(query),
    }
}

/// The local answer, or None when the question is not about our names.
fn answer_locally(zone: &NetworkZone, query: &Message, question: &Query) -> Option<Message> {
    let qname = question.name().to_ascii();
    let qtype = question.query_type();
    if qtype == RecordType::PTR {
        let owner = reverse_address(question.name()).and_then(|a| zone.pointer(a))?;
        let target = Name::from_ascii(format!("{owner}.")).ok()?;
        let mut reply = response_to(query, ResponseCode::NoError);
        reply.set_authoritative(true);
        reply.add_answer(Record::from_rdata(question.name().clone(), LOCAL_TTL, RData::PTR(PTR(target))));
        return Some(reply);
    }
    match zone.lookup(&qname) {
        Lookup::NotOurs => None,
        Lookup::NoSuchName => {
            let mut reply = response_to(query, ResponseCode::NXDomain);
            reply.set_authoritative(true);
            Some(reply)
        }
        Lookup::Found(addresses) => {
            let mut reply = response_to(query, ResponseCode::NoError);
            reply.set_authoritative(true);
            for address in addresses {
                let rdata = match (address, qtype) {
                    (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                // The answer carries the name as asked (case and all), as resolvers expect.
                reply.add_answer(Record::from_rdata(question.name().clone(), LOCAL_TTL, rdata));
            }
            Some(reply)
        }
    }
}

/// The address a reverse name (`4.3.2.1.in-addr.arpa.`, nibbles under `ip6.arpa.`) stands
/// for, if it is a complete one.
pub fn reverse_address(name: &Name) -> Option<IpAddr> {
    let text = name.to_ascii().trim_end_matches('.').to_ascii_lowercase();
    if let Some(rest) = text.strip_suffix(".in-addr.arpa") {
        let mut octets: Vec<u8> = rest.split('.').map(|o| o.parse().ok()).collect::<Option<_>>()?;
        if octets.len() != 4 {
            return None;
        }
        octets.reverse();
        return Some(IpAddr::from([octets[0], octets[1], octets[2], octets[3]]));
    }
    let rest = text.strip_suffix(".ip6.arpa")?;
    let nibbles: Vec<u8> = rest
        .split('.')
        .map(|n| if n.len() == 1 { u8::from_str_radix(n, 16).ok() } else { None })
        .collect::<Option<_>>()?;
    if nibbles.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, pair) in nibbles.rchunks(2).enumerate() {
        bytes[i] = (pair[1] << 4) | pair[0];
    }
    Some(IpAddr::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_dns::HostRecord;

    fn zone() -> NetworkZone {
        let mut zone = NetworkZone::new("n", "dns.podman", vec![], vec![]);
        zone.add(&HostRecord {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            name: "web".into(),
            aliases: vec!["www".into()],
            addresses: vec!["10.0.0.2".parse().unwrap(), "fd00::2".parse().unwrap()],
        })
        .unwrap();
        zone
    }

    fn query(name: &str, qtype: RecordType) -> Message {
        let mut q = Message::new();
        q.set_id(4242).set_recursion_desired(true);
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        q
    }

    fn reply(zone: &NetworkZone, q: &Message, transport: Transport) -> Message {
        match handle(zone, &q.to_vec().unwrap(), transport) {
            Outcome::Reply(bytes) => Message::from_vec(&bytes).unwrap(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn rdatas(m: &Message) -> Vec<String> {
        m.answers().iter().map(|r| r.data().to_string()).collect()
    }

    #[test]
    fn a_aaaa_and_case() {
        let zone = zone();
        let r = reply(&zone, &query("WeB.dns.PODMAN.", RecordType::A), Transport::Udp);
        assert_eq!(r.id(), 4242);
        assert!(r.authoritative());
        assert_eq!(r.response_code(), ResponseCode::NoError);
        assert_eq!(rdatas(&r), ["10.0.0.2"]);
        assert_eq!(r.answers()[0].name().to_ascii(), "WeB.dns.PODMAN.");
        assert_eq!(r.answers()[0].ttl(), 0);
        let r = reply(&zone, &query("www.dns.podman.", RecordType::AAAA), Transport::Udp);
        assert_eq!(rdatas(&r), ["fd00::2"]);
        // The name exists without MX records: NOERROR with no answers (NODATA).
        let r = reply(&zone, &query("web.dns.podman.", RecordType::MX), Transport::Udp);
        assert_eq!((r.response_code(), r.answers().len()), (ResponseCode::NoError, 0));
        let r = reply(&zone, &query("gone.dns.podman.", RecordType::A), Transport::Udp);
        assert_eq!(r.response_code(), ResponseCode::NXDomain);
    }

    #[test]
    fn ptr_for_v4_and_v6() {
        let zone = zone();
        let r = reply(&zone, &query("2.0.0.10.in-addr.arpa.", RecordType::PTR), Transport::Udp);
        assert_eq!(rdatas(&r), ["web.dns.podman."]);
        let v6 = Name::from(IpAddr::from("fd00::2".parse::<std::net::Ipv6Addr>().unwrap()));
        let r = reply(&zone, &query(&v6.to_ascii(), RecordType::PTR), Transport::Udp);
        assert_eq!(rdatas(&r), ["web.dns.podman."]);
        // Someone else's address goes upstream.
        let q = query("9.0.0.10.in-addr.arpa.", RecordType::PTR);
        assert!(matches!(handle(&zone, &q.to_vec().unwrap(), Transport::Udp), Outcome::Forward(_)));
    }

    #[test]
    fn reverse_names_parse_only_when_complete() {
        assert_eq!(
            reverse_address(&Name::from_ascii("4.3.2.1.in-addr.arpa.").unwrap()),
            "1.2.3.4".parse().ok()
        );
        assert_eq!(reverse_address(&Name::from_ascii("3.2.1.in-addr.arpa.").unwrap()), None);
        assert_eq!(reverse_address(&Name::from_ascii("300.3.2.1.in-addr.arpa.").unwrap()), None);
        let v6: std::net::Ipv6Addr = "2001:db8::1:abcd".parse().unwrap();
        assert_eq!(reverse_address(&Name::from(IpAddr::V6(v6))), Some(IpAddr::V6(v6)));
    }

    #[test]
    fn other_names_are_forwarded() {
        let q = query("example.com.", RecordType::A);
        assert!(matches!(handle(&zone(), &q.to_vec().unwrap(), Transport::Udp), Outcome::Forward(_)));
    }

    #[test]
    fn a_large_answer_is_truncated_over_udp_and_whole_over_tcp() {
        let mut zone = NetworkZone::new("n", "dns.podman", vec![], vec![]);
        for i in 0..16u8 {
            zone.add(&HostRecord {
                container_id: format!("c{i}"),
                ifname: "eth0".into(),
                name: format!("n{i}"),
                aliases: vec!["big-service-name-that-is-long".into()],
                addresses: (0..16u8).map(|j| IpAddr::from([10, 1, i, j])).collect(),
            })
            .unwrap();
        }
        let q = query("big-service-name-that-is-long.dns.podman.", RecordType::A);
        let udp = reply(&zone, &q, Transport::Udp);
        assert!(udp.truncated());
        assert!(udp.answers().is_empty());
        let tcp = reply(&zone, &q, Transport::Tcp);
        assert!(!tcp.truncated());
        assert_eq!(tcp.answers().len(), 256);
    }

    #[test]
    fn a_udp_answer_never_exceeds_512_bytes_without_edns_nor_1232_with_it() {
        let mut zone = NetworkZone::new("n", "dns.podman", vec![], vec![]);
        for i in 0..8u8 {
            zone.add(&HostRecord {
                container_id: format!("c{i}"),
                ifname: "eth0".into(),
                name: format!("n{i}"),
                aliases: vec!["svc".into()],
                addresses: (0..16u8).map(|j| IpAddr::from([10, 1, i, j])).collect(),
            })
            .unwrap();
        }
        // 128 A records: about 2 KB whole.
        for (edns, limit) in
            [(None, 512), (Some(600), 600), (Some(4096), 1232), (Some(65535), 1232), (Some(100), 512)]
        {
            let mut q = query("svc.dns.podman.", RecordType::A);
            if let Some(size) = edns {
                let mut e = Edns::new();
                e.set_max_payload(size);
                q.set_edns(e);
            }
            assert_eq!(udp_limit(&q), limit, "{edns:?}");
            let Outcome::Reply(bytes) = handle(&zone, &q.to_vec().unwrap(), Transport::Udp) else { panic!() };
            assert!(bytes.len() <= limit, "{edns:?}: {} bytes", bytes.len());
            assert!(Message::from_vec(&bytes).unwrap().truncated(), "{edns:?}");
            let Outcome::Reply(bytes) = handle(&zone, &q.to_vec().unwrap(), Transport::Tcp) else { panic!() };
            assert!(bytes.len() > 2000);
        }
    }

    #[test]
    fn bad_input() {
        let zone = zone();
        // Garbage with a query header: FORMERR with its id.
        let mut junk = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        junk.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]); // a pointer to itself
        match handle(&zone, &junk, Transport::Udp) {
            Outcome::Reply(b) => {
                let m = Message::from_vec(&b).unwrap();
                assert_eq!((m.id(), m.response_code()), (0x1234, ResponseCode::FormErr));
            }
            other => panic!("{other:?}"),
        }
        // Too short to be a header, and responses: silence.
        assert!(matches!(handle(&zone, &[1, 2, 3], Transport::Udp), Outcome::Drop));
        let mut response = query("web.dns.podman.", RecordType::A);
        response.set_message_type(MessageType::Response);
        assert!(matches!(handle(&zone, &response.to_vec().unwrap(), Transport::Udp), Outcome::Drop));
        // Two questions: FORMERR. An UPDATE: NOTIMP.
        let mut two = query("web.dns.podman.", RecordType::A);
        two.add_query(Query::query(Name::from_ascii("www.dns.podman.").unwrap(), RecordType::A));
        assert_eq!(reply(&zone, &two, Transport::Udp).response_code(), ResponseCode::FormErr);
        let mut update = query("web.dns.podman.", RecordType::A);
        update.set_op_code(OpCode::Update);
        assert_eq!(reply(&zone, &update, Transport::Udp).response_code(), ResponseCode::NotImp);
    }
}
