//! The daemon against a scripted DHCP server (in the test's server namespace) that
//! misbehaves the ways real networks do: garbage, replies to other transactions, broken
//! options, and a DHCPNAK on renewal. None of it may crash the daemon or end up in a lease.

use crate::common;
use crate::support;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cni_dhcp::options as opt;
use cni_dhcp::wire::{Message, BOOTREPLY};
use cni_testkit::ns::TestNetns;
use common::call;
use support::{wait_for, with_scripted_server, Network};

const PREFIX: &str = "cdf";

/// A UDP socket on port 67 in the server namespace, bound to its interface so limited
/// broadcasts (255.255.255.255) leave through it.
fn server_socket(net: &Network) -> UdpSocket {
    let socket = net.server_udp_socket("0.0.0.0:67");
    socket.set_broadcast(true).unwrap();
    socket
}

fn reply(to: &Message, kind: opt::MessageType, yiaddr: Ipv4Addr) -> Message {
    let mut m = to.clone();
    m.op = BOOTREPLY;
    m.yiaddr = yiaddr;
    m.options = vec![(opt::MESSAGE_TYPE, vec![kind as u8]), (opt::SERVER_ID, vec![10, 77, 0, 1])];
    if kind != opt::MessageType::Nak {
        m.set_option(opt::SUBNET_MASK, vec![255, 255, 255, 0]);
        m.set_option(opt::ROUTERS, vec![10, 77, 0, 1]);
        m.set_option(opt::LEASE_TIME, 30u32.to_be_bytes().to_vec());
        m.set_option(opt::RENEWAL_TIME, 1u32.to_be_bytes().to_vec());
        m.set_option(opt::REBINDING_TIME, 20u32.to_be_bytes().to_vec());
        // A classless-routes option whose second entry is cut short: the first is kept.
        m.set_option(opt::CLASSLESS_ROUTES, vec![0, 10, 77, 0, 1, 24, 192, 168]);
        m.set_option(opt::DOMAIN_SEARCH, vec![0xc0, 0x00]); // a pointer loop
    }
    m
}

/// Answers every request after some junk; NAKs the first REQUEST (as a server does that
/// offered one address to two clients) and the first renewal of `first`, then hands out
/// `second`.
fn serve(socket: &UdpSocket, stop: &AtomicBool, first: Ipv4Addr, second: Ipv4Addr) {
    let broadcast = SocketAddrV4::new(Ipv4Addr::BROADCAST, 68);
    let send = |m: &Message| socket.send_to(&m.encode(), broadcast).unwrap();
    let mut nak_sent = false;
    let mut selecting_nak_sent = false;
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let Ok(len) = socket.recv(&mut buf) else { continue };
        let Ok(request) = Message::decode(&buf[..len]) else { continue };
        let kind = request
            .option(opt::MESSAGE_TYPE)
            .and_then(|v| v.first().copied())
            .and_then(opt::MessageType::from_byte);
        let offered = if nak_sent { second } else { first };
        match kind {
            Some(opt::MessageType::Discover) => {
                socket.send_to(b"not dhcp at all", broadcast).unwrap();
                let mut other = reply(&request, opt::MessageType::Offer, Ipv4Addr::new(10, 77, 0, 99));
                other.xid ^= 1;
                send(&other);
                let mut truncated = reply(&request, opt::MessageType::Offer, offered).encode();
                truncated.truncate(245);
                truncated.extend_from_slice(&[51, 4, 0]);
                socket.send_to(&truncated, broadcast).unwrap();
                let mut no_server_id = reply(&request, opt::MessageType::Offer, Ipv4Addr::new(10, 77, 0, 98));
                no_server_id.options.retain(|(c, _)| *c != opt::SERVER_ID);
                send(&no_server_id);
                send(&reply(&request, opt::MessageType::Offer, offered));
            }
            Some(opt::MessageType::Request) if request.ciaddr.is_unspecified() && !selecting_nak_sent => {
                selecting_nak_sent = true;
                send(&reply(&request, opt::MessageType::Nak, Ipv4Addr::UNSPECIFIED));
            }
            Some(opt::MessageType::Request) if !request.ciaddr.is_unspecified() && !nak_sent => {
                nak_sent = true;
                let mut nak = reply(&request, opt::MessageType::Nak, Ipv4Addr::UNSPECIFIED);
                nak.set_option(opt::MESSAGE, b"address moved".to_vec());
                send(&nak);
            }
            Some(opt::MessageType::Request) => {
                let addr = if request.ciaddr.is_unspecified() { offered } else { request.ciaddr };
                send(&reply(&request, opt::MessageType::Ack, addr));
            }
            _ => {}
        }
    }
}

#[test]
fn junk_is_ignored_and_naks_lead_to_a_new_exchange() {
    let net = Network::new(PREFIX);
    let socket = server_socket(&net);
    let (first, second) = (Ipv4Addr::new(10, 77, 0, 20), Ipv4Addr::new(10, 77, 0, 21));
    with_scripted_server(
        |stop| serve(&socket, stop, first, second),
        || {
            let _daemon = net.daemon();
            let container = TestNetns::with_prefix(PREFIX).unwrap();
            let out = call("bridge", "ADD", &net.host, Some(&container), &net.conf()).run();
            assert!(out.success(), "ADD: {} {}\n{}", out.stdout, out.stderr, net.log("daemon.log"));
            let result = out.json();
            assert_eq!(result["ips"][0]["address"], "10.77.0.20/24");
            assert_eq!(result["routes"], serde_json::json!([{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}]));
            assert!(result["dns"].get("search").is_none(), "{result}");

            // T1 is 1 s: the renewal gets the NAK, the daemon says so and leases again.
            wait_for("a new lease after the NAK", Duration::from_secs(20), || {
                net.status()
                    .leases
                    .first()
                    .is_some_and(|l| l.address == "10.77.0.21/24" && l.state == "bound")
            });
            let log = net.log("daemon.log");
            let refused = log.lines().find(|l| l.contains("the server refused to extend a lease"));
            assert!(refused.is_some_and(|l| l.contains("reason=") && l.contains("address moved")), "{log}");
            let moved = log.lines().find(|l| l.contains("new lease at another address"));
            assert!(
                moved.is_some_and(|l| l.contains("lease=10.77.0.21/24") && l.contains("old=10.77.0.20/24")),
                "{log}"
            );
            // The container still has the old address: CHECK says so.
            let mut conf = net.conf();
            conf["prevResult"] = result.clone();
            let check = call("bridge", "CHECK", &net.host, Some(&container), &conf).run();
            assert!(!check.success(), "CHECK passed with a moved lease");
            assert!(check.error().msg.contains("10.77.0.21"), "{}", check.error().msg);
        },
    );
}
