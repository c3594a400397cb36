//! Who the resolver answers, attacked from every place that can route to a gateway address:
//! a host's neighbour with a route to the pod subnet (its own address, and one of the pod
//! subnet spoofed), a container of another network on the same host, a container that
//! forges a neighbour's address to aim answers at it (the answer size is measured against
//! the query's), and upstream lists that name the resolver itself. Each attack is checked
//! by traffic (no answer arrives, the victim's byte count) and by the resolver's counters.
//! Namespaces are prefixed `dg`. Needs root.

use crate::forwarding::{start_stub, STUB};
use crate::support::{query, Container, Host, Network};
use cni_testkit::traffic::{udp_echo, udp_echo_server};
use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::RecordType;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

const PREFIX: &str = "dg";

/// Runs `ip <args>` in `ns` and fails the test when it fails.
fn ip(ns: &cni_testkit::ns::TestNetns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Loads an nftables ruleset into `ns`.
fn nft(ns: &cni_testkit::ns::TestNetns, ruleset: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.nft");
    std::fs::write(&file, ruleset).unwrap();
    let out = ns.command("nft").arg("-f").arg(&file).output().unwrap();
    assert!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr));
}

/// Every way `from` can ask `gateway`: UDP and TCP, port 53 and the resolver's own port.
/// Returns the ones that got an answer.
fn answered(from: &Container, gateway: IpAddr, name: &str) -> Vec<String> {
    let mut got = Vec::new();
    for port in [53, 1053] {
        let server = SocketAddr::new(gateway, port);
        if from.ask_udp(server, &query(name, RecordType::A)).is_some() {
            got.push(format!("udp {server}"));
        }
        if from.ask_tcp(server, &query(name, RecordType::A)).is_some() {
            got.push(format!("tcp {server}"));
        }
    }
    got
}

/// A neighbour of the host: its own namespace on a veth to the host's (192.168.250.2/24,
/// the host 192.168.250.1), with a route to `subnet` through the host.
fn neighbour(host: &Host, subnet: &str) -> Container {
    let nb = Container::with_prefix(PREFIX, "neighbour");
    ip(&host.ns, &["link", "add", "dgnb0", "type", "veth", "peer", "name", "eth0", "netns", nb.ns.name()]);
    ip(&host.ns, &["addr", "add", "192.168.250.1/24", "dev", "dgnb0"]);
    ip(&host.ns, &["link", "set", "dgnb0", "up"]);
    ip(&nb.ns, &["addr", "add", "192.168.250.2/24", "dev", "eth0"]);
    ip(&nb.ns, &["link", "set", "eth0", "up"]);
    ip(&nb.ns, &["route", "add", subnet, "via", "192.168.250.1"]);
    nb
}

#[test]
fn a_routed_neighbour_gets_no_answer_on_port_53_nor_on_the_resolvers_port() {
    let host = Host::with_prefix(PREFIX);
    start_stub(&host);
    let mut net = Network::new("dgnet", 40);
    net.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut web = Container::with_prefix(PREFIX, "web");
    net.add(&host, &mut web, &[]).unwrap();
    let gateway = net.gateway();
    let nb = neighbour(&host, "10.89.40.0/24");

    // The neighbour does reach the gateway address: a UDP echo there answers it.
    let echo = udp_echo_server(host.ns.netns(), SocketAddr::new(gateway, 7777)).unwrap();
    udp_echo(nb.ns.netns(), echo.local_addr(), b"reachable", Duration::from_secs(3)).unwrap();

    let queries = host.counter("queries").unwrap();
    for name in ["web.dns.podman.", "example.test."] {
        assert_eq!(answered(&nb, gateway, name), Vec::<String>::new(), "{name} from the neighbour");
    }
    // Refused silently and counted (the resolver's port; port 53 is not redirected for it).
    assert!(host.counter("refused").unwrap() >= 2, "{:?}", host.status());

    // The neighbour forges an address of the pod subnet: right source, wrong interface.
    ip(&nb.ns, &["addr", "add", "10.89.40.77/32", "dev", "eth0"]);
    let refused = host.counter("refused").unwrap();
    nb.ns
        .run(|| {
            let socket = UdpSocket::bind("10.89.40.77:0").unwrap();
            let q = query("example.test.", RecordType::A).to_vec().unwrap();
            for port in [53, 1053] {
                socket.send_to(&q, SocketAddr::new(gateway, port)).unwrap();
            }
        })
        .unwrap();
    cni_testkit::poll::until("the forged query is counted", cni_testkit::poll::EVENTUALLY, || {
        host.counter("refused").unwrap() > refused
    });
    assert_eq!(host.counter("queries").unwrap(), queries, "no query of the neighbour was answered");

    // The network's own container resolves names and forwarded names, over UDP and TCP.
    assert_eq!(web.lookup(gateway, "web.dns.podman."), Ok(vec![web.address("dgnet").to_string()]));
    assert_eq!(web.lookup(gateway, "example.test."), Ok(vec!["192.0.2.1".to_string()]));
    let tcp = web.ask_tcp(SocketAddr::new(gateway, 53), &query("web.dns.podman.", RecordType::A)).unwrap();
    assert_eq!(tcp.answers().len(), 1);
    net.del(&host, &mut web);
}

#[test]
fn a_container_of_another_network_gets_no_answer_from_this_networks_gateway() {
    let host = Host::with_prefix(PREFIX);
    start_stub(&host);
    let mut ours = Network::new("dgours", 41);
    ours.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut theirs = Network::new("dgtheirs", 42);
    theirs.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut web = Container::with_prefix(PREFIX, "web");
    ours.add(&host, &mut web, &[]).unwrap();
    let mut other = Container::with_prefix(PREFIX, "other");
    theirs.add(&host, &mut other, &[]).unwrap();
    // A default route through its gateway, as most runtimes give: the other network's
    // gateway address is then reachable (the host forwards nothing: it is a local address).
    ip(&other.ns, &["route", "add", "default", "via", "10.89.42.1"]);
    let echo = udp_echo_server(host.ns.netns(), SocketAddr::new(ours.gateway(), 7777)).unwrap();
    udp_echo(other.ns.netns(), echo.local_addr(), b"reachable", Duration::from_secs(3)).unwrap();

    for name in ["web.dns.podman.", "example.test."] {
        assert_eq!(answered(&other, ours.gateway(), name), Vec::<String>::new(), "{name} across networks");
    }
    assert!(host.counter("refused").unwrap() >= 2, "{:?}", host.status());

    // Each still resolves on its own gateway, its names and forwarded ones.
    assert_eq!(web.lookup(ours.gateway(), "web.dns.podman."), Ok(vec![web.address("dgours").to_string()]));
    assert_eq!(web.lookup(ours.gateway(), "example.test."), Ok(vec!["192.0.2.1".to_string()]));
    assert_eq!(
        other.lookup(theirs.gateway(), "other.dns.podman."),
        Ok(vec![other.address("dgtheirs").to_string()])
    );
    assert_eq!(other.lookup(theirs.gateway(), "example.test."), Ok(vec!["192.0.2.1".to_string()]));
    ours.del(&host, &mut web);
    theirs.del(&host, &mut other);
}

/// The query a reflector sends: a name whose upstream answer is about 3 KB, with EDNS
/// claiming `edns` bytes of room, or without EDNS.
fn reflector_query(edns: Option<u16>) -> Vec<u8> {
    let mut q = query("huge.example.test.", RecordType::A);
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        q.set_edns(e);
    }
    q.to_vec().unwrap()
}

#[test]
fn a_spoofed_query_reflects_no_more_than_the_udp_limit_at_its_victim() {
    const PORT: u16 = 40053;
    let host = Host::with_prefix(PREFIX);
    start_stub(&host);
    let mut net = Network::new("dgrefl", 43);
    net.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut attacker = Container::with_prefix(PREFIX, "attacker");
    net.add(&host, &mut attacker, &[]).unwrap();
    let mut victim = Container::with_prefix(PREFIX, "victim");
    net.add(&host, &mut victim, &[]).unwrap();
    let gateway = net.gateway();
    // The victim talked to the gateway, so the host knows its MAC.
    assert!(victim.lookup(gateway, "victim.dns.podman.").is_ok());

    // The attacker's kernel rewrites the source of its DNS queries to the victim's address.
    let victim_ip = victim.address("dgrefl");
    nft(
        &attacker.ns,
        &format!(
            "table ip dgspoof {{\n chain post {{\n  type nat hook postrouting priority srcnat;\n  \
             udp dport 53 snat to {victim_ip}\n }}\n}}\n"
        ),
    );
    let inbox = victim.ns.run(|| UdpSocket::bind(("0.0.0.0", PORT)).unwrap()).unwrap();
    inbox.set_read_timeout(Some(Duration::from_secs(3))).unwrap();

    for (edns, limit) in [(Some(65535u16), 1232usize), (Some(4096), 1232), (None, 512)] {
        let sent = reflector_query(edns);
        let rounds = 5;
        attacker
            .ns
            .run(|| {
                let socket = UdpSocket::bind(("0.0.0.0", PORT)).unwrap();
                for _ in 0..rounds {
                    socket.send_to(&sent, SocketAddr::new(gateway, 53)).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .unwrap();
        let mut received = Vec::new();
        let mut buf = vec![0u8; 65535];
        while received.len() < rounds {
            match inbox.recv_from(&mut buf) {
                Ok((n, _)) => received.push(n),
                Err(_) => break,
            }
        }
        let total: usize = received.iter().sum();
        let ratio = total as f64 / (sent.len() * rounds) as f64;
        eprintln!(
            "reflection, EDNS {edns:?}: {} replies, {total} bytes at the victim for {} sent: ratio {ratio:.2}",
            received.len(),
            sent.len() * rounds
        );
        assert!(!received.is_empty(), "the forged queries were answered (at the victim)");
        let largest = received.iter().copied().max().unwrap();
        assert!(largest <= limit, "EDNS {edns:?}: a {largest}-byte reply, at most {limit}");
        assert!(ratio <= limit as f64 / sent.len() as f64);
    }
    // The truncated answer sends the real client to TCP, where it gets everything.
    let whole = attacker
        .ask_tcp(SocketAddr::new(gateway, 53), &Message::from_vec(&reflector_query(Some(65535))).unwrap())
        .unwrap();
    assert_eq!((whole.answers().len(), whole.truncated()), (200, false));
    net.del(&host, &mut attacker);
    net.del(&host, &mut victim);
}

#[test]
fn an_upstream_that_is_the_resolver_itself_is_skipped() {
    let host = Host::with_prefix(PREFIX);
    start_stub(&host);
    // The host's resolv.conf names the resolver's own listening address first, in the
    // IPv4-mapped spelling, then a real server on port 53.
    let stub53 = host.ns.run(|| UdpSocket::bind("127.0.0.2:53").unwrap()).unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = stub53.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let reply = crate::forwarding::reply_to(&q, &["192.0.2.53".parse().unwrap()], false);
            let _ = stub53.send_to(&reply.to_vec().unwrap(), peer);
        }
    });
    let conf = tempfile::tempdir().unwrap();
    let resolv_conf = conf.path().join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        "nameserver ::ffff:10.89.44.1\nnameserver 10.89.44.1\nnameserver 127.0.0.2\n",
    )
    .unwrap();
    host.start_resolver(&resolv_conf);
    // The resolver listens on port 53 itself, so a loop would close at once.
    let mut net = Network::new("dgloop", 44);
    net.dnsname["bindPort"] = serde_json::json!(53);
    let mut web = Container::with_prefix(PREFIX, "web");
    net.add(&host, &mut web, &[]).unwrap();

    let forwarded = host.counter("forwarded").unwrap();
    let reply =
        web.ask_udp(SocketAddr::new(net.gateway(), 53), &query("example.test.", RecordType::A)).unwrap();
    assert_eq!(reply.response_code(), ResponseCode::NoError);
    assert_eq!(reply.answers()[0].data().to_string(), "192.0.2.53");
    assert_eq!(
        host.counter("forwarded").unwrap(),
        forwarded + 1,
        "one forward, no loop: {:?}",
        host.status()
    );

    // A network's own upstream naming the resolver's port behind the redirect: skipped too.
    let mut other = Network::new("dgloop2", 45);
    other.dnsname["upstreams"] = serde_json::json!(["[::ffff:10.89.45.1]:1053", STUB]);
    let mut client = Container::with_prefix(PREFIX, "client");
    other.add(&host, &mut client, &[]).unwrap();
    let forwarded = host.counter("forwarded").unwrap();
    assert_eq!(client.lookup(other.gateway(), "example.test."), Ok(vec!["192.0.2.1".to_string()]));
    assert_eq!(host.counter("forwarded").unwrap(), forwarded + 1, "{:?}", host.status());
    net.del(&host, &mut web);
    other.del(&host, &mut client);
}
