//! The dnsname plugin and cni-dnsd together, on the real kernel: containers attached by
//! bridge + host-local + dnsname in a throwaway host namespace ask the resolver on the
//! bridge's gateway from inside their own namespaces. Needs root.

use crate::support::{query, Container, Host, Network};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use std::net::SocketAddr;

#[test]
fn names_aliases_case_and_ptr_are_served_and_del_removes_at_once() {
    let host = Host::new();
    let net = Network::new("dnsnet", 1);
    let mut web = Container::new("web");
    let mut db = Container::new("db");
    let result = net.add(&host, &mut web, &["www", "Frontend"]).unwrap();
    net.add(&host, &mut db, &[]).unwrap();
    // The result points the container at the gateway, with the domain to search.
    assert_eq!(result["dns"]["nameservers"], serde_json::json!(["10.89.1.1"]));
    assert_eq!(result["dns"]["search"], serde_json::json!(["dns.podman"]));

    let gw = net.gateway();
    let web_ip = web.address("dnsnet").to_string();
    for name in ["web.dns.podman.", "WWW.dns.podman.", "frontend.DNS.PODMAN.", "web."] {
        assert_eq!(db.lookup(gw, name), Ok(vec![web_ip.clone()]), "{name}");
    }
    assert_eq!(web.lookup(gw, "db.dns.podman."), Ok(vec![db.address("dnsnet").to_string()]));
    let reverse = format!("{}.in-addr.arpa.", web_ip.split('.').rev().collect::<Vec<_>>().join("."));
    let ptr = db.ask_udp(SocketAddr::new(gw, 53), &query(&reverse, RecordType::PTR)).unwrap();
    assert_eq!(ptr.answers()[0].data().to_string(), "web.dns.podman.");
    // Over TCP too.
    let tcp = db.ask_tcp(SocketAddr::new(gw, 53), &query("web.dns.podman.", RecordType::A)).unwrap();
    assert_eq!(tcp.answers()[0].data().to_string(), web_ip);

    assert!(net.dnsname_verb(&host, &web, "CHECK").success());
    assert!(net.status(&host).success(), "{:?}", net.status(&host));

    net.del(&host, &mut web);
    assert_eq!(db.lookup(gw, "web.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert_eq!(db.lookup(gw, "www.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert!(db.lookup(gw, "db.dns.podman.").is_ok());
    // DEL again is fine.
    web.results.insert("dnsnet".into(), (result, vec![]));
    let again = net.dnsname_verb(&host, &web, "DEL");
    assert!(again.success(), "{again:?}");
    net.del(&host, &mut db);
    // The last attachment took the network's records with it.
    assert!(!host.state_dir().join("networks/dnsnet").exists());
}

#[test]
fn two_networks_keep_their_names_apart() {
    let host = Host::new();
    let (red, blue) = (Network::new("red", 2), Network::new("blue", 3));
    let mut a = Container::new("alpha");
    let mut b = Container::new("beta");
    red.add(&host, &mut a, &[]).unwrap();
    blue.add(&host, &mut b, &[]).unwrap();
    assert!(a.lookup(red.gateway(), "alpha.dns.podman.").is_ok());
    assert_eq!(a.lookup(red.gateway(), "beta.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert!(b.lookup(blue.gateway(), "beta.dns.podman.").is_ok());
    assert_eq!(b.lookup(blue.gateway(), "alpha.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    // One resolver serves both.
    let status = std::fs::read_to_string(host.state_dir().join("dnsd.pid")).unwrap();
    assert!(!status.trim().is_empty());
    red.del(&host, &mut a);
    blue.del(&host, &mut b);
}

#[test]
fn a_killed_resolver_is_restarted_by_the_next_plugin_call_with_the_same_names() {
    let host = Host::new();
    let net = Network::new("dnsk9", 4);
    let mut web = Container::new("web");
    let mut other = Container::new("other");
    net.add(&host, &mut web, &["www"]).unwrap();
    let first = host.resolver_pid().unwrap();
    host.kill_resolver();
    assert_eq!(web.lookup(net.gateway(), "www.dns.podman."), Err("no reply".to_string()));
    // Any plugin call starts it again; it reads the records from disk.
    net.add(&host, &mut other, &[]).unwrap();
    let second = host.resolver_pid().unwrap();
    assert_ne!(first, second);
    let want = Ok(vec![web.address("dnsk9").to_string()]);
    assert_eq!(other.lookup(net.gateway(), "www.dns.podman."), want);
    // STATUS alone restarts it too.
    host.kill_resolver();
    assert!(net.status(&host).success());
    assert_eq!(other.lookup(net.gateway(), "web.dns.podman."), want);
    net.del(&host, &mut web);
    net.del(&host, &mut other);
}

#[test]
fn the_resolver_keeps_only_the_capability_to_bind_port_53() {
    let host = Host::new();
    let net = Network::new("dnscap", 5);
    let mut web = Container::new("web");
    net.add(&host, &mut web, &[]).unwrap();
    let pid = host.resolver_pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name)).unwrap().split_whitespace().nth(1).unwrap().to_string()
    };
    assert_eq!(field("CapEff:"), "0000000000000400");
    assert_eq!(field("CapPrm:"), "0000000000000400");
    assert_eq!(field("NoNewPrivs:"), "1");
    // It listens on the gateway only, at its own port; nothing listens on port 53 at all.
    let ss = |proto: &str| {
        let out = host.ns.command("ss").args([proto, "-Hln"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // The TCP listener takes connections from the network's bridge only.
    for (proto, local) in [("-u", "10.89.5.1:1053"), ("-t", "10.89.5.1%dnsbr5:1053")] {
        let text = ss(proto);
        assert!(text.contains(local), "{text}");
        assert!(!text.contains(":53 "), "{text}");
    }
    // Port 53 of the gateway is redirected there by the network's own table, before dstnat,
    // for queries that arrive on the network's bridge only.
    let rules = host.ns.nft_text();
    assert!(rules.contains("table inet cni-dns-"), "{rules}");
    assert!(rules.contains("priority dstnat - 10"), "{rules}");
    assert!(
        rules.contains(r#"iifname "dnsbr5" ip daddr 10.89.5.1 udp dport 53 dnat ip to 10.89.5.1:1053"#),
        "{rules}"
    );
    assert!(
        rules.contains(r#"iifname "dnsbr5" ip daddr 10.89.5.1 tcp dport 53 dnat ip to 10.89.5.1:1053"#),
        "{rules}"
    );
    net.del(&host, &mut web);
    // The network's last DEL takes the table with it.
    let rules = host.ns.nft_text();
    assert!(!rules.contains("cni-dns-"), "{rules}");
}

#[test]
fn bind_port_53_listens_on_port_53_without_a_redirect() {
    let host = Host::new();
    let mut net = Network::new("dns53", 15);
    net.dnsname["bindPort"] = serde_json::json!(53);
    let mut web = Container::new("web");
    net.add(&host, &mut web, &[]).unwrap();
    assert!(web.lookup(net.gateway(), "web.dns.podman.").is_ok());
    let out = host.ns.command("ss").args(["-Hlnu"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("10.89.15.1:53 "));
    assert!(!host.ns.nft_text().contains("cni-dns-"));
    net.del(&host, &mut web);
}

#[test]
fn gc_drops_the_records_of_attachments_not_in_the_valid_list() {
    let host = Host::new();
    let net = Network::new("dnsgc", 6);
    let mut keep = Container::new("keep");
    let mut gone = Container::new("gone");
    net.add(&host, &mut keep, &[]).unwrap();
    net.add(&host, &mut gone, &["ghost"]).unwrap();
    let out = net.gc(&host, &[&keep]);
    assert!(out.success(), "{out:?}");
    assert_eq!(keep.lookup(net.gateway(), "ghost.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert_eq!(keep.lookup(net.gateway(), "gone.dns.podman."), Err(ResponseCode::NXDomain.to_string()));
    assert!(keep.lookup(net.gateway(), "keep.dns.podman.").is_ok());
    net.del(&host, &mut keep);
}

#[test]
fn names_that_are_not_dns_labels_are_refused_and_nothing_is_written() {
    let host = Host::new();
    let net = Network::new("dnsbad", 7);
    let mut bad = Container::new("bad name");
    let err = net.add(&host, &mut bad, &[]).unwrap_err();
    assert_eq!(err.error().code, 4, "{err:?}");
    assert!(err.error().msg.contains("K8S_POD_NAME"), "{err:?}");
    let mut ok = Container::new("fine");
    let err = net.add(&host, &mut ok, &["evil\n10.0.0.1"]).unwrap_err();
    assert_eq!(err.error().code, 7, "{err:?}");
    assert!(err.error().msg.contains("runtimeConfig.aliases.dnsbad"), "{err:?}");
    let hosts = host.state_dir().join("networks/dnsbad/hosts");
    let files = std::fs::read_dir(&hosts).map(|d| d.count()).unwrap_or(0);
    assert_eq!(files, 0);
}

#[test]
fn a_network_emptied_and_refilled_at_once_is_served_again() {
    // The last DEL stops the gateway's listener; an ADD right after (podman restart) must
    // get a listener again although the old one may still be closing.
    let host = Host::new();
    let net = Network::new("dnsagain", 11);
    let mut client = Container::new("client");
    for round in 0..5 {
        net.add(&host, &mut client, &[]).unwrap();
        let want = Ok(vec![client.address("dnsagain").to_string()]);
        assert_eq!(client.lookup(net.gateway(), "client.dns.podman."), want, "round {round}");
        net.del(&host, &mut client);
    }
}

#[test]
fn garbage_and_a_tcp_flood_do_not_take_the_resolver_down() {
    use std::io::Read;
    use std::net::{TcpStream, UdpSocket};
    use std::time::Duration;
    let host = Host::new();
    let net = Network::new("dnsflood", 12);
    let mut web = Container::new("web");
    net.add(&host, &mut web, &[]).unwrap();
    let server = SocketAddr::new(net.gateway(), 53);
    // Junk datagrams: short, a header claiming 65535 questions, a response, random bytes.
    web.ns
        .run(|| {
            let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
            let mut junk: Vec<Vec<u8>> =
                vec![vec![1], vec![0x12, 0x34, 0x01, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0]];
            junk.push(vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            junk.extend(
                (0..50u8).map(|i| (0..200).map(|j| i.wrapping_mul(31).wrapping_add(j as u8)).collect()),
            );
            for packet in &junk {
                socket.send_to(packet, server).unwrap();
            }
        })
        .unwrap();
    // More idle TCP clients than the resolver takes (64): the extra ones are closed at once.
    let (held, refused) = web
        .ns
        .run(|| {
            // All at once (the resolver also closes a client idle for 5 s, which would
            // free slots if they came slowly), then see which ones it closed.
            let streams: Vec<TcpStream> = (0..80)
                .map(|_| TcpStream::connect_timeout(&server, Duration::from_secs(2)).unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(500));
            let mut held = Vec::new();
            let mut refused = 0;
            for mut stream in streams {
                stream.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
                let mut byte = [0u8; 1];
                match stream.read(&mut byte) {
                    Ok(0) => refused += 1,
                    _ => held.push(stream),
                }
            }
            (held, refused)
        })
        .unwrap();
    assert_eq!((held.len(), refused), (64, 16), "64 clients held, the rest closed");
    // UDP still answers while the TCP slots are taken.
    assert_eq!(web.lookup(net.gateway(), "web.dns.podman."), Ok(vec![web.address("dnsflood").to_string()]));
    drop(held);
    // Once the clients are gone TCP serves again.
    std::thread::sleep(Duration::from_millis(300));
    let tcp = web.ask_tcp(server, &query("web.dns.podman.", RecordType::A)).unwrap();
    assert_eq!(tcp.answers().len(), 1);
    net.del(&host, &mut web);
}

#[test]
fn a_name_two_containers_share_answers_both_and_a_del_removes_only_its_own() {
    let host = Host::new();
    let net = Network::new("dnsdup", 13);
    let mut a = Container::new("a");
    let mut b = Container::new("b");
    net.add(&host, &mut a, &["shared"]).unwrap();
    net.add(&host, &mut b, &["shared"]).unwrap();
    let (ip_a, ip_b) = (a.address("dnsdup").to_string(), b.address("dnsdup").to_string());
    let mut both = a.lookup(net.gateway(), "shared.dns.podman.").unwrap();
    both.sort();
    let mut want = vec![ip_a.clone(), ip_b.clone()];
    want.sort();
    assert_eq!(both, want);
    // The reference's DEL dropped every hosts line with the name; ours only a's record.
    net.del(&host, &mut a);
    assert_eq!(b.lookup(net.gateway(), "shared.dns.podman."), Ok(vec![ip_b]));
    net.del(&host, &mut b);
}

#[test]
fn dual_stack_aaaa_and_ip6_ptr_over_the_ipv6_gateway() {
    let host = Host::new();
    let mut net = Network::new("dnsv6", 14);
    net.dual_stack = true;
    let mut web = Container::new("web");
    let mut client = Container::new("client");
    let result = net.add(&host, &mut web, &[]).unwrap();
    net.add(&host, &mut client, &[]).unwrap();
    let nameservers = result["dns"]["nameservers"].clone();
    assert_eq!(nameservers, serde_json::json!(["10.89.14.1", "fd89:14::1"]));
    let v6: std::net::Ipv6Addr =
        result["ips"][1]["address"].as_str().unwrap().split('/').next().unwrap().parse().unwrap();
    let gw6: std::net::IpAddr = "fd89:14::1".parse().unwrap();
    // The container's address may still be in DAD for a moment: ask until it answers.
    let mut reply = None;
    for _ in 0..50 {
        reply = client.ask_udp(SocketAddr::new(gw6, 53), &query("web.dns.podman.", RecordType::AAAA));
        if reply.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let reply = reply.expect("the resolver answers on the IPv6 gateway");
    assert_eq!(reply.answers()[0].data().to_string(), v6.to_string());
    let reverse = hickory_proto::rr::Name::from(std::net::IpAddr::V6(v6)).to_ascii();
    let ptr = client.ask_tcp(SocketAddr::new(gw6, 53), &query(&reverse, RecordType::PTR)).unwrap();
    assert_eq!(ptr.answers()[0].data().to_string(), "web.dns.podman.");
    net.del(&host, &mut web);
    net.del(&host, &mut client);
}
