//! The daemon's DHCPv6 client against a scripted server (a socket in the test's server
//! namespace) that plays the attacker or the broken network: garbage, replies to other
//! transactions and other clients, special addresses offered, lifetimes out of order, an
//! oversized DNS list, a search list that tries to write resolver settings, a zero valid
//! lifetime and NoBinding on renewal. None of it may crash the daemon or end up in a lease.

use crate::common;
use crate::support;

use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cni_dhcp::options::encode_domain_search;
use cni_dhcp::wire6::{
    IaNa, Message, MessageType, Status, ALL_SERVERS, OPT_CLIENT_ID, OPT_DNS_SERVERS, OPT_DOMAIN_LIST,
    OPT_IA_NA, OPT_SERVER_ID, STATUS_NO_BINDING,
};
use cni_testkit::ns::TestNetns;
use common::call;
use serde_json::json;
use support::{wait_for, with_scripted_server, Network, BRIDGE};

const PREFIX: &str = "d6f";
const GOOD: &str = "fd77::42";
const SERVER_DUID: [u8; 10] = [0, 3, 0, 1, 2, 0, 0, 0, 0, 1];

/// A UDP socket on port 547 in the server namespace, bound to its interface and in the
/// All_DHCP_Relay_Agents_and_Servers group.
fn server_socket(net: &Network) -> UdpSocket {
    net.server_v6();
    let index = net.server.netlink().unwrap().link_by_name("srv0").unwrap().unwrap().index;
    let socket = net.server_udp_socket("[::]:547");
    socket.join_multicast_v6(&ALL_SERVERS, index).unwrap();
    socket
}

/// A reply of `kind` to `to`, granting `address` with the given lifetimes.
fn reply(to: &Message, kind: MessageType, address: &str, preferred: u32, valid: u32) -> Message {
    let mut m = Message::new(kind, to.xid);
    m.push(OPT_CLIENT_ID, to.option(OPT_CLIENT_ID).unwrap().to_vec());
    m.push(OPT_SERVER_ID, SERVER_DUID.to_vec());
    let iaid = to.ia_nas().next().unwrap().iaid;
    let ia = IaNa::grant(iaid, (1, 25), address.parse().unwrap(), (preferred, valid));
    m.push(OPT_IA_NA, ia.encode());
    m
}

/// The good answer, with 1000 DNS servers and a search list whose second name holds a
/// newline and a resolver directive.
fn good(to: &Message, kind: MessageType) -> Message {
    let mut m = reply(to, kind, GOOD, 20, 30);
    let dns: Vec<u8> =
        (1..=1000u16).flat_map(|i| Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0x53, i).octets()).collect();
    m.push(OPT_DNS_SERVERS, dns);
    let mut search = encode_domain_search(&["good.example"]);
    search.extend_from_slice(b"\x15evil\nnameserver 1.2.3\x07example\0");
    m.push(OPT_DOMAIN_LIST, search);
    m
}

/// Everything the script sends before the good ADVERTISE: each must be dropped.
fn bad_advertises(to: &Message) -> Vec<Vec<u8>> {
    let advertise = |address: &str, preferred: u32, valid: u32| {
        reply(to, MessageType::Advertise, address, preferred, valid)
    };
    let mut out = vec![vec![0xff; 3], vec![2, 0, 0]];
    let mut other_xid = good(to, MessageType::Advertise);
    other_xid.xid ^= 1;
    out.push(other_xid.encode());
    let mut other_client = good(to, MessageType::Advertise);
    other_client.options[0].1 = vec![0, 4, 9, 9, 9, 9];
    out.push(other_client.encode());
    for bad in ["ff02::1", "fe80::1", "::", "::1", "::ffff:10.0.0.1"] {
        out.push(advertise(bad, 20, 30).encode());
    }
    out.push(advertise(GOOD, 40, 30).encode()); // preferred beyond valid
    out.push(advertise(GOOD, 0, 0).encode()); // already invalid
    let mut no_server = good(to, MessageType::Advertise);
    no_server.options.retain(|(c, _)| *c != OPT_SERVER_ID);
    out.push(no_server.encode());
    let mut truncated = good(to, MessageType::Advertise).encode();
    truncated.extend_from_slice(&[0, 23, 0xff, 0xff, 1]); // an option running past the end
    out.push(truncated);
    out
}

/// The NoBinding reply to a RENEW (RFC 8415 18.3.4), its status both in the IA and, as a
/// second status option, after it.
fn no_binding(to: &Message) -> Message {
    let mut m = Message::new(MessageType::Reply, to.xid);
    m.push(OPT_CLIENT_ID, to.option(OPT_CLIENT_ID).unwrap().to_vec());
    m.push(OPT_SERVER_ID, SERVER_DUID.to_vec());
    let mut ia = IaNa::request(to.ia_nas().next().unwrap().iaid, None);
    ia.status = Status { code: STATUS_NO_BINDING, message: "forgotten".into() };
    let mut bytes = ia.encode();
    bytes.extend_from_slice(&[0, 13, 0, 11, 0, 3]);
    bytes.extend_from_slice(b"forgotten");
    m.push(OPT_IA_NA, bytes);
    m
}

/// The script, until `stop`: every bad ADVERTISE before the good one; a REPLY from another
/// server before ours; the first RENEW (counted in `renewals`) answered with a valid
/// lifetime of 0, later ones with NoBinding.
fn serve(socket: &UdpSocket, stop: &AtomicBool, renewals: &AtomicUsize) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, from)) = socket.recv_from(&mut buf) else { continue };
        let SocketAddr::V6(from) = from else { continue };
        let Ok(msg) = Message::decode(&buf[..len]) else { continue };
        let send = |bytes: &[u8]| {
            let _ = socket.send_to(bytes, from);
        };
        match msg.kind {
            k if k == MessageType::Solicit as u8 => {
                for bytes in bad_advertises(&msg) {
                    send(&bytes);
                }
                send(&good(&msg, MessageType::Advertise).encode());
            }
            k if k == MessageType::Request as u8 => {
                let mut other_server = good(&msg, MessageType::Reply);
                other_server.options[1].1 = vec![0, 3, 0, 1, 9, 9, 9, 9, 9, 9];
                send(&other_server.encode());
                send(&good(&msg, MessageType::Reply).encode());
            }
            // The first RENEW: our address with a valid lifetime of 0.
            k if k == MessageType::Renew as u8 && renewals.fetch_add(1, Ordering::Relaxed) == 0 => {
                let held = msg.ia_nas().next().unwrap().addresses[0].address.to_string();
                send(&reply(&msg, MessageType::Reply, &held, 0, 0).encode());
            }
            k if k == MessageType::Renew as u8 => send(&no_binding(&msg).encode()),
            _ => {}
        }
    }
}

#[test]
fn hostile_replies_are_dropped_and_no_binding_on_renewal_ends_the_lease() {
    let net = Network::new(PREFIX);
    let socket = server_socket(&net);
    let renewals = AtomicUsize::new(0);
    with_scripted_server(
        |stop| serve(&socket, stop, &renewals),
        || {
            let _daemon = net.daemon();
            let container = TestNetns::with_prefix(PREFIX).unwrap();
            let conf = json!({"cniVersion": "1.1.0", "name": "d6f", "type": "bridge", "bridge": BRIDGE,
                          "ipam": {"type": "dhcp", "daemonSocketPath": net.socket(), "families": [6],
                                   "ipv6PrefixLength": 64}});
            let out = call("bridge", "ADD", &net.host, Some(&container), &conf).run();
            assert!(out.success(), "ADD: {} {}\n{}", out.stdout, out.stderr, net.log("daemon.log"));
            let result = out.json();
            assert_eq!(result["ips"][0]["address"], "fd77::42/64", "{result}");
            let dns = &result["dns"];
            assert_eq!(dns["nameservers"].as_array().unwrap().len(), 8, "bounded: {dns}");
            assert_eq!(dns["search"], json!(["good.example"]), "the forged name is dropped: {dns}");
            let log = net.log("daemon.log");
            for why in ["ff02::1 is not", "fe80::1 is not", "lifetimes are unusable", "no usable server id"] {
                assert!(log.contains(why), "not logged as dropped: {why}\n{log}");
            }

            // T1 is 1 s: the first RENEW gets a valid lifetime of 0, the second NoBinding; each
            // ends the lease and the daemon asks again.
            wait_for("a valid lifetime of 0 to end the lease", Duration::from_secs(20), || {
                net.log("daemon.log").contains("the server refused to extend a lease")
                    && net.log("daemon.log").contains("reason=the server ended the binding")
            });
            wait_for("the NoBinding to end the lease", Duration::from_secs(20), || {
                net.log("daemon.log").contains("NoBinding (3): forgotten")
            });
            wait_for("a new lease after it", Duration::from_secs(20), || {
                net.log("daemon.log")
                    .lines()
                    .any(|l| l.contains("new lease") && l.contains("lease=fd77::42/64"))
            });
            assert!(renewals.load(Ordering::Relaxed) >= 2);
            let status = net.status();
            assert!(status.ok && status.leases.len() == 1, "the daemon keeps running: {status:?}");
            assert!(call("bridge", "DEL", &net.host, Some(&container), &conf).run().success());
        },
    );
}
