//! Forwarding through the resolver to a stub upstream server that runs in the test's host
//! namespace: ordinary answers, a spoofed reply that must be ignored, a large answer that
//! comes back truncated over UDP and whole over TCP, and an upstream that never answers.
//! Needs root.

use crate::support::{query, Container, Host, Network};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub const STUB: &str = "127.0.0.1:5353";

pub fn reply_to(q: &Message, addresses: &[Ipv4Addr], truncated: bool) -> Message {
    let mut r = Message::new();
    r.set_id(q.id()).set_message_type(MessageType::Response).set_recursion_available(true);
    r.add_queries(q.queries().iter().cloned());
    r.set_truncated(truncated);
    for a in addresses {
        r.add_answer(Record::from_rdata(q.queries()[0].name().clone(), 60, RData::A(A(*a))));
    }
    r
}

pub fn big() -> Vec<Ipv4Addr> {
    (0..100u8).map(|i| Ipv4Addr::new(10, 200, 0, i)).collect()
}

/// The stub's answer for a query, by name; `None` means stay silent.
fn stub_answer(q: &Message, over_tcp: bool) -> Option<Message> {
    let name = q.queries()[0].name().to_ascii().to_ascii_lowercase();
    match name.as_str() {
        "example.test." => Some(reply_to(q, &[Ipv4Addr::new(192, 0, 2, 1)], false)),
        "big.example.test." if over_tcp => Some(reply_to(q, &big(), false)),
        "big.example.test." => Some(reply_to(q, &[], true)),
        "spoofed.example.test." => Some(reply_to(q, &[Ipv4Addr::new(192, 0, 2, 7)], false)),
        // Whole over UDP whatever its size, as an upstream that ignores the client's limit.
        "huge.example.test." => {
            Some(reply_to(q, &(0..200u8).map(|i| Ipv4Addr::new(10, 201, 0, i)).collect::<Vec<_>>(), false))
        }
        _ => None,
    }
}

/// Serves the stub in the host namespace; returns the count of TCP queries it got.
pub fn start_stub(host: &Host) -> Arc<AtomicUsize> {
    let (udp, tcp) =
        host.ns.run(|| (UdpSocket::bind(STUB).unwrap(), TcpListener::bind(STUB).unwrap())).unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = udp.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let Some(reply) = stub_answer(&q, false) else { continue };
            if q.queries()[0].name().to_ascii().starts_with("spoofed") {
                // A forged reply first: wrong id, another address. It must be ignored.
                let mut forged = reply_to(&q, &[Ipv4Addr::new(203, 0, 113, 66)], false);
                forged.set_id(q.id().wrapping_add(1));
                udp.send_to(&forged.to_vec().unwrap(), peer).unwrap();
            }
            udp.send_to(&reply.to_vec().unwrap(), peer).unwrap();
        }
    });
    let tcp_queries = Arc::new(AtomicUsize::new(0));
    let counter = tcp_queries.clone();
    std::thread::spawn(move || {
        for stream in tcp.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut len = [0u8; 2];
            if stream.read_exact(&mut len).is_err() {
                continue;
            }
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if stream.read_exact(&mut buf).is_err() {
                continue;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let q = Message::from_vec(&buf).unwrap();
            if let Some(reply) = stub_answer(&q, true) {
                let bytes = reply.to_vec().unwrap();
                let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&bytes);
                let _ = stream.write_all(&framed);
            }
        }
    });
    tcp_queries
}

#[test]
fn other_names_go_to_the_networks_upstream_over_udp_and_tcp() {
    let host = Host::new();
    let tcp_queries = start_stub(&host);
    let mut net = Network::new("dnsfwd", 8);
    net.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut ctr = Container::new("client");
    net.add(&host, &mut ctr, &[]).unwrap();
    let server = SocketAddr::new(net.gateway(), 53);

    assert_eq!(ctr.lookup(net.gateway(), "example.test."), Ok(vec!["192.0.2.1".to_string()]));
    // The forged datagram is not taken for the answer.
    assert_eq!(ctr.lookup(net.gateway(), "spoofed.example.test."), Ok(vec!["192.0.2.7".to_string()]));

    // Large: over UDP the client is told to use TCP; over TCP it gets every record.
    let q = query("big.example.test.", RecordType::A);
    let udp = ctr.ask_udp(server, &q).unwrap();
    assert!(udp.truncated(), "{udp:?}");
    assert_eq!(udp.id(), q.id());
    let tcp = ctr.ask_tcp(server, &q).unwrap();
    assert!(!tcp.truncated());
    assert_eq!(tcp.answers().len(), 100);
    assert_eq!(tcp.id(), q.id());
    assert!(tcp_queries.load(Ordering::SeqCst) >= 1, "the resolver fell back to TCP upstream");

    // An upstream that never answers: SERVFAIL after the timeout, not silence.
    let silent = ctr.ask_udp(server, &query("silent.example.test.", RecordType::A)).unwrap();
    assert_eq!(silent.response_code(), ResponseCode::ServFail);

    // Our own names still never leave the host.
    assert_eq!(ctr.lookup(net.gateway(), "client.dns.podman."), Ok(vec![ctr.address("dnsfwd").to_string()]));
    net.del(&host, &mut ctr);
}
