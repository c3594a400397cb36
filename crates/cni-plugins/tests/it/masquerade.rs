//! `ipMasq` (bridge and ptp) and `macspoofchk` (bridge): traffic decides, and the ruleset is
//! read back with `nft -j`.

use crate::common;

use cni_net::netlink::{AddressFlags, LinkSpec, Route, VethSpec};
use cni_net::Netlink;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, ok};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const PREFIX: &str = "cnq";

/// An "outside" namespace wired to the host by a veth: host 10.<n>.255.1, outside .2.
fn outside_world(host: &TestNetns, n: u8) -> TestNetns {
    let outside = TestNetns::with_prefix(PREFIX).unwrap();
    let mut nl = host.netlink().unwrap();
    nl.add_veth(&VethSpec {
        link: LinkSpec::new("cnq-out"),
        peer: LinkSpec::new("eth0").netns(outside.netns()),
    })
    .unwrap();
    let host_end = nl.require_link("cnq-out").unwrap();
    nl.add_address(host_end.index, format!("10.{n}.255.1/24").parse().unwrap(), AddressFlags::empty())
        .unwrap();
    nl.set_link_up(host_end.index).unwrap();
    let mut onl = outside.netlink().unwrap();
    let eth0 = onl.require_link("eth0").unwrap();
    onl.add_address(eth0.index, format!("10.{n}.255.2/24").parse().unwrap(), AddressFlags::empty()).unwrap();
    onl.set_link_up(eth0.index).unwrap();
    outside
}

/// Connects from `from` to a listener in `server_ns` and returns the source address the
/// server saw.
fn source_seen_by(server_ns: &TestNetns, from: &TestNetns, addr: SocketAddr) -> std::net::IpAddr {
    let listener = server_ns.run(|| TcpListener::bind(addr)).unwrap().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).unwrap();
        peer.ip()
    });
    from.run(|| {
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to the outside");
        s.write_all(b"ping").unwrap();
    })
    .unwrap();
    server.join().unwrap()
}

/// Names of the chains in table `table`.
fn chains(ruleset: &[Value], table: &str) -> Vec<String> {
    ruleset
        .iter()
        .filter_map(|o| o.get("chain"))
        .filter(|c| c["table"] == table)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn bridge_ip_masq_shows_the_host_address_outside_and_del_removes_the_rules() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let outside = outside_world(&env.host, 90);
    let c = &env.containers[0];
    let mut conf = json!({"cniVersion": "1.0.0", "name": "masqnet", "type": "bridge", "bridge": "cnq0",
        "isGateway": true, "ipMasq": true,
        "ipam": {"type": "static", "addresses": [{"address": "10.91.0.2/24"}], "routes": [{"dst": "0.0.0.0/0"}]}});
    let before = env.host.nft_json();
    let r = add("bridge", &env.host, c, &conf);

    let seen = source_seen_by(&outside, c, "10.90.255.2:7201".parse().unwrap());
    assert_eq!(seen.to_string(), "10.90.255.1", "the outside must see the host, not the container");
    // Inside the subnet there is no masquerading: the gateway sees the container itself.
    let seen = source_seen_by(&env.host, c, "10.91.0.1:7202".parse().unwrap());
    assert_eq!(seen.to_string(), "10.91.0.2");

    let ruleset = env.host.nft_json();
    assert_eq!(chains(&ruleset, "cni_plugins_masquerade").len(), 2, "{ruleset:?}");
    conf["prevResult"] = r;
    ok(call("bridge", "CHECK", &env.host, Some(c), &conf).run());
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    let after = env.host.nft_json();
    assert_eq!(chains(&after, "cni_plugins_masquerade"), ["postrouting"], "{after:?}");
    let elements: Vec<&Value> =
        after.iter().filter_map(|o| o.get("map")).filter_map(|m| m.get("elem")).collect();
    assert!(elements.is_empty(), "map elements left: {after:?}");
    assert!(chains(&before, "cni_plugins_masquerade").is_empty());
}

#[test]
fn ptp_ip_masq_and_gc_of_a_vanished_container() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let outside = outside_world(&env.host, 92);
    let conf = |addr: &str| {
        json!({"cniVersion": "1.1.0", "name": "ptpmasq", "type": "ptp", "ipMasq": true,
            "ipam": {"type": "static", "addresses": [{"address": addr, "gateway": "10.93.0.1"}], "routes": [{"dst": "0.0.0.0/0"}]}})
    };
    add("ptp", &env.host, &env.containers[0], &conf("10.93.0.2/24"));
    add("ptp", &env.host, &env.containers[1], &conf("10.93.0.3/24"));
    let seen = source_seen_by(&outside, &env.containers[0], "10.92.255.2:7203".parse().unwrap());
    assert_eq!(seen.to_string(), "10.92.255.1");

    // GC with only container 1 valid removes container 0's rules and keeps container 1's.
    let mut gc = conf("10.93.0.2/24");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": env.containers[1].name(), "ifname": "eth0"}]);
    ok(call("ptp", "GC", &env.host, None, &gc).run());
    let left = chains(&env.host.nft_json(), "cni_plugins_masquerade");
    assert_eq!(left.len(), 2, "{left:?}");
    let seen = source_seen_by(&outside, &env.containers[1], "10.92.255.2:7204".parse().unwrap());
    assert_eq!(seen.to_string(), "10.92.255.1");
    // Without masquerading, replies need a route back to the container's subnet.
    let mut onl = outside.netlink().unwrap();
    onl.add_route(&Route::new("10.93.0.0/24".parse().unwrap()).gateway("10.92.255.1".parse().unwrap()))
        .unwrap();
    let seen = source_seen_by(&outside, &env.containers[0], "10.92.255.2:7205".parse().unwrap());
    assert_eq!(seen.to_string(), "10.93.0.2", "container 0 is no longer masqueraded");
}

#[test]
fn mac_spoof_check_drops_frames_with_another_source_mac() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let conf = |addr: &str| {
        json!({"cniVersion": "1.0.0", "name": "spoofnet", "type": "bridge", "bridge": "cnqs", "macspoofchk": true,
            "ipam": {"type": "static", "addresses": [{"address": addr}]}})
    };
    add("bridge", &env.host, a, &conf("10.94.0.2/24"));
    add("bridge", &env.host, b, &conf("10.94.0.3/24"));
    let target: SocketAddr = "10.94.0.3:7206".parse().unwrap();
    let _server = tcp_echo_server(b.netns(), target).unwrap();
    tcp_echo(a.netns(), target, b"honest", Duration::from_secs(5)).unwrap();

    // Container a forges its MAC: its frames no longer pass the bridge.
    let mut nl: Netlink = a.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    nl.set_link_mac(eth0.index, "c2:de:ad:be:ef:01".parse().unwrap()).unwrap();
    let mut bnl = b.netlink().unwrap();
    let beth0 = bnl.require_link("eth0").unwrap();
    bnl.delete_neighbour(beth0.index, "10.94.0.2".parse().unwrap()).ok();
    assert!(
        tcp_echo(a.netns(), target, b"forged", Duration::from_millis(1500)).is_err(),
        "forged frames got through"
    );

    let rules = env.host.nft_json();
    assert_eq!(chains(&rules, "cni_macspoofchk").len(), 3, "{rules:?}");
    ok(call("bridge", "DEL", &env.host, Some(a), &conf("10.94.0.2/24")).run());
    ok(call("bridge", "DEL", &env.host, Some(b), &conf("10.94.0.3/24")).run());
    assert_eq!(chains(&env.host.nft_json(), "cni_macspoofchk"), ["prerouting"]);
}

/// The ruleset with packet and byte counts zeroed: the spoof check's tag counters count
/// whatever the containers send meanwhile (router solicitations, DAD).
fn without_counts(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                *inner = match key.as_str() {
                    "packets" | "bytes" => json!(0),
                    _ => without_counts(inner.take()),
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| *item = without_counts(item.take())),
        _ => {}
    }
    value
}

/// The host namespace's nf_tables generation: the kernel counts each committed transaction.
fn generation(host: &TestNetns) -> u32 {
    let mut nft = host.run(cni_net::nft::NftClient::new).unwrap().unwrap();
    nft.generation().unwrap()
}

#[test]
fn bridge_add_with_masquerade_and_spoof_check_is_one_transaction_and_a_refused_one_changes_nothing() {
    let env = HostAndContainers::with_prefix("shp", 3).unwrap();
    let conf = |net: &str, bridge: &str, addr: &str| {
        json!({"cniVersion": "1.0.0", "name": net, "type": "bridge", "bridge": bridge, "isGateway": true,
            "ipMasq": true, "macspoofchk": true, "ipam": {"type": "static", "addresses": [{"address": addr}]}})
    };
    // The first ADD on the host also makes both tables.
    add("bridge", &env.host, &env.containers[0], &conf("shpnet", "shp1", "10.95.0.2/24"));

    let before = generation(&env.host);
    add("bridge", &env.host, &env.containers[1], &conf("shpnet", "shp1", "10.95.0.3/24"));
    assert_eq!(generation(&env.host) - before, 1, "masquerade and spoof check in one nf_tables transaction");
    let ruleset = env.host.nft_json();
    assert_eq!(chains(&ruleset, "cni_plugins_masquerade").len(), 3, "{ruleset:?}");
    assert_eq!(chains(&ruleset, "cni_macspoofchk").len(), 3, "{ruleset:?}");

    // Another network's container asks for an address the masquerade map already has: the
    // batch is refused whole, so its spoof check is not left behind either.
    let before = generation(&env.host);
    let ruleset = without_counts(json!(env.host.nft_json()));
    let refused =
        call("bridge", "ADD", &env.host, Some(&env.containers[2]), &conf("shpother", "shp2", "10.95.0.3/24"))
            .run();
    assert!(!refused.success(), "{}", refused.stdout);
    assert!(refused.stdout.contains("10.95.0.3"), "{}", refused.stdout);
    assert_eq!(without_counts(json!(env.host.nft_json())), ruleset);
    assert_eq!(generation(&env.host), before, "a refused batch commits nothing");
}
