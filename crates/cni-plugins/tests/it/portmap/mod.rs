//! `portmap` on the real kernel, chained after `bridge`, in throwaway namespaces: the test's
//! host namespace holds the bridge and the nftables rules, a container namespace the
//! mapped service, and an "outside" namespace — joined to the host by a veth made here —
//! plays a remote client.

use crate::common;
mod scale;
mod support;
mod versions;
use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_net::nft::conntrack::ConntrackClient;
use cni_net::nft::Family;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, udp_echo, udp_echo_server};
use common::{add, call, ok};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const PREFIX: &str = "cnm";
const TIMEOUT: Duration = Duration::from_secs(4);

/// Host namespace, one container, and the outside world.
struct World {
    env: HostAndContainers,
    outside: TestNetns,
}

impl World {
    fn new() -> World {
        let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
        let outside = TestNetns::with_prefix(PREFIX).unwrap();
        let mut host = env.host.netlink().unwrap();
        let peer = LinkSpec::new("cnmo1").netns(outside.netns());
        host.add_veth(&VethSpec { link: LinkSpec::new("cnmo0"), peer }).unwrap();
        let mut far = outside.netlink().unwrap();
        for (nl, name, addrs) in [
            (&mut host, "cnmo0", ["192.168.91.1/24", "fd92::1/64"]),
            (&mut far, "cnmo1", ["192.168.91.2/24", "fd92::2/64"]),
        ] {
            let link = nl.require_link(name).unwrap();
            for addr in addrs {
                nl.add_address(link.index, addr.parse().unwrap(), AddressFlags::Nodad).unwrap();
            }
            nl.set_link_up(link.index).unwrap();
        }
        World { env, outside }
    }

    fn host(&self) -> &TestNetns {
        &self.env.host
    }

    fn container(&self) -> &TestNetns {
        &self.env.containers[0]
    }

    /// `nft -j list ruleset` of the host namespace, without the version banner.
    fn ruleset(&self) -> Vec<Value> {
        self.host().nft_json()
    }

    fn nft_text(&self) -> String {
        self.host().nft_text()
    }
}

/// `hairpinMode` as podman sets it: where `br_netfilter` is loaded (as on this machine),
/// DNATed hairpin traffic is bridged back out of the port it came in on.
fn bridge_conf(version: &str, bridge: &str, addresses: Value) -> Value {
    json!({"cniVersion": version, "name": "pmtest", "type": "bridge", "bridge": bridge, "isGateway": true,
        "hairpinMode": true,
        "ipam": {"type": "static", "addresses": addresses,
                 "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}})
}

fn portmap_conf(version: &str, mappings: Value, prev: &Value) -> Value {
    json!({"cniVersion": version, "name": "pmtest", "type": "portmap",
        "runtimeConfig": {"portMappings": mappings}, "prevResult": prev})
}

#[track_caller]
fn tcp_ok(from: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    if let Err(e) = tcp_echo(from.netns(), addr, b"mapped tcp", TIMEOUT) {
        panic!("no TCP echo from {} via {addr}: {e}", from.name());
    }
}

#[track_caller]
fn udp_ok(from: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    if let Err(e) = udp_echo(from.netns(), addr, b"mapped udp", TIMEOUT) {
        panic!("no UDP echo from {} via {addr}: {e}", from.name());
    }
}

#[track_caller]
fn tcp_fails(from: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    assert!(tcp_echo(from.netns(), addr, b"x", Duration::from_secs(1)).is_err(), "{addr} must not be mapped");
}

fn server(ns: &TestNetns, addr: &str, udp: bool) -> cni_testkit::traffic::EchoServer {
    let addr: SocketAddr = addr.parse().unwrap();
    if udp {
        udp_echo_server(ns.netns(), addr).unwrap()
    } else {
        tcp_echo_server(ns.netns(), addr).unwrap()
    }
}

/// UDP conntrack entries to `port` in `ns`.
fn udp_entries_to(ns: &TestNetns, port: u16) -> usize {
    let mut ct = ns.run(ConntrackClient::new).unwrap().unwrap();
    ct.list(Family::Ipv4).unwrap().iter().filter(|e| e.protocol == 17 && e.dst_port == port).count()
}

#[test]
fn ipv4_mappings_from_outside_from_the_host_and_hairpin() {
    let w = World::new();
    let (host, ctr) = (w.host(), w.container());
    let prev = add("bridge", host, ctr, &bridge_conf("1.0.0", "cnm0", json!([{"address": "10.91.0.2/24"}])));
    let before = w.ruleset();

    let mappings = json!([
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
        {"hostPort": 8081, "containerPort": 81, "protocol": "tcp", "hostIP": "192.168.91.1"},
    ]);
    let conf = portmap_conf("1.0.0", mappings, &prev);
    let result = add("portmap", host, ctr, &conf);
    assert_eq!(result, prev, "portmap passes prevResult through");
    let route_localnet =
        host.run(|| cni_net::sysctl::read("net.ipv4.conf.cnm0.route_localnet")).unwrap().unwrap();
    assert_eq!(route_localnet, "1");

    let _tcp = server(ctr, "10.91.0.2:80", false);
    let _tcp81 = server(ctr, "10.91.0.2:81", false);
    let _udp = server(ctr, "10.91.0.2:53", true);
    tcp_ok(&w.outside, "192.168.91.1:8080"); // from outside to the host's address
    tcp_ok(host, "127.0.0.1:8080"); // from the host via loopback (route_localnet + SNAT)
    tcp_ok(host, "192.168.91.1:8080"); // from the host to its own address
    tcp_ok(host, "10.91.0.1:8080"); // any local address of the host
    tcp_ok(ctr, "192.168.91.1:8080"); // hairpin: the container through the host
    udp_ok(&w.outside, "192.168.91.1:5353");
    udp_ok(host, "127.0.0.1:5353");
    udp_ok(ctr, "10.91.0.1:5353");
    // hostIP restricts the destination address.
    tcp_ok(&w.outside, "192.168.91.1:8081");
    tcp_fails(host, "10.91.0.1:8081");

    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    ok(call("portmap", "CHECK", host, Some(ctr), &check).run());

    ok(call("portmap", "DEL", host, Some(ctr), &conf).run());
    tcp_fails(&w.outside, "192.168.91.1:8080");
    let err = call("portmap", "CHECK", host, Some(ctr), &check).run().error();
    assert!(err.msg.contains("hostport v4 tcp 8080"), "{}", err.msg);
    // DEL is idempotent, and needs neither the namespace nor prevResult.
    ok(call("portmap", "DEL", host, Some(ctr), &conf).run());
    let bare = json!({"cniVersion": "1.0.0", "name": "pmtest", "type": "portmap"});
    ok(call("portmap", "DEL", host, Some(ctr), &bare).unset("CNI_NETNS").run());

    // What DEL leaves is only the empty shared skeleton of our table; GC with no valid
    // attachment removes that too, so the ruleset is exactly what it was.
    let after_del = w.ruleset();
    let foreign: Vec<&Value> = after_del.iter().filter(|o| !is_our_skeleton(o)).collect();
    assert_eq!(foreign, before.iter().collect::<Vec<_>>(), "{}", w.nft_text());
    let gc =
        json!({"cniVersion": "1.1.0", "name": "pmtest", "type": "portmap", "cni.dev/valid-attachments": []});
    ok(call("portmap", "GC", host, None, &gc).run());
    assert_eq!(w.ruleset(), before, "{}", w.nft_text());
}

/// An object of table `inet cni_portmap` that is not a container's: the table, its base
/// and shared chains and rules, and maps without elements.
fn is_our_skeleton(object: &Value) -> bool {
    let (kind, body) = object.as_object().and_then(|m| m.iter().next()).unwrap();
    let table = if kind == "table" { &body["name"] } else { &body["table"] };
    if table != "cni_portmap" {
        return false;
    }
    let chain =
        body.get(if kind == "chain" { "name" } else { "chain" }).and_then(Value::as_str).unwrap_or("");
    !chain.starts_with("cni-") && body.get("elem").is_none()
}

#[test]
fn re_add_replaces_mappings_and_flushes_stale_udp_conntrack() {
    let w = World::new();
    let (host, ctr) = (w.host(), w.container());
    let prev = add("bridge", host, ctr, &bridge_conf("0.4.0", "cnm1", json!([{"address": "10.92.0.2/24"}])));
    add(
        "portmap",
        host,
        ctr,
        &portmap_conf("0.4.0", json!([{"hostPort": 8080, "containerPort": 80}]), &prev),
    );

    // A UDP flow to port 5399 before it is mapped leaves a conntrack entry in the host
    // that would keep steering that flow past the new mapping.
    let probe: SocketAddr = "192.168.91.1:5399".parse().unwrap();
    let _ = udp_echo(w.outside.netns(), probe, b"early", Duration::from_millis(200));
    assert!(udp_entries_to(host, 5399) > 0, "the probe made no conntrack entry");

    let mappings = json!([{"hostPort": 5399, "containerPort": 53, "protocol": "udp"}]);
    let conf = portmap_conf("0.4.0", mappings, &prev);
    add("portmap", host, ctr, &conf);
    assert_eq!(udp_entries_to(host, 5399), 0, "stale UDP conntrack entries were not flushed");
    let _udp = server(ctr, "10.92.0.2:53", true);
    let _tcp = server(ctr, "10.92.0.2:80", false);
    udp_ok(&w.outside, "192.168.91.1:5399");
    // The re-ADD replaced the earlier mapping instead of adding to it.
    tcp_fails(&w.outside, "192.168.91.1:8080");
    assert!(!w.nft_text().contains("tcp dport 8080"), "{}", w.nft_text());
    ok(call("portmap", "DEL", host, Some(ctr), &conf).run());
}

#[test]
fn ipv6_mappings_from_outside_from_the_host_and_hairpin() {
    let w = World::new();
    let (host, ctr) = (w.host(), w.container());
    let addresses = json!([{"address": "10.93.0.2/24"}, {"address": "fd91::2/64"}]);
    let prev = add("bridge", host, ctr, &bridge_conf("1.1.0", "cnm2", addresses));
    let mappings = json!([
        {"hostPort": 8080, "containerPort": 80},
        {"hostPort": 8082, "containerPort": 82, "hostIP": "::"},
    ]);
    let conf = portmap_conf("1.1.0", mappings, &prev);
    add("portmap", host, ctr, &conf);
    let _s80 = server(ctr, "[::]:80", false);
    let _s82 = server(ctr, "[fd91::2]:82", false);
    // The first forwarded IPv6 connection right after ADD: it used to fail now and then
    // while the new bridge's link-local address was still in DAD (see
    // `common::iface::skip_link_local_dad`).
    tcp_ok(&w.outside, "[fd92::1]:8080");
    tcp_ok(&w.outside, "192.168.91.1:8080"); // the same mapping also serves IPv4
    tcp_ok(host, "[fd92::1]:8080");
    // Not from [::1]: IPv6 has no route_localnet, so the kernel drops the un-NATed answers
    // to ::1 arriving on the bridge (the reference has the same limit).
    tcp_ok(ctr, "[fd92::1]:8080");
    tcp_ok(&w.outside, "[fd92::1]:8082");
    tcp_fails(&w.outside, "192.168.91.1:8082"); // hostIP "::" maps IPv6 only
    ok(call("portmap", "DEL", host, Some(ctr), &conf).run());
    tcp_fails(&w.outside, "[fd92::1]:8080");
}

#[test]
fn conditions_masq_all_and_mark_bit() {
    let w = World::new();
    let (host, ctr) = (w.host(), w.container());
    let prev = add("bridge", host, ctr, &bridge_conf("1.0.0", "cnm3", json!([{"address": "10.94.0.2/24"}])));
    let mut conf = portmap_conf("1.0.0", json!([{"hostPort": 8080, "containerPort": 80}]), &prev);
    conf["conditionsV4"] = json!(["!", "-s", "192.168.91.2"]);
    conf["masqAll"] = json!(true);
    conf["markMasqBit"] = json!(5);
    add("portmap", host, ctr, &conf);
    let _s = server(ctr, "10.94.0.2:80", false);
    tcp_fails(&w.outside, "192.168.91.1:8080"); // excluded by the condition
    tcp_ok(host, "192.168.91.1:8080");
    let text = w.nft_text();
    assert!(text.contains("ip saddr != 192.168.91.2"), "{text}");
    assert!(text.contains("meta mark & 0x00000020 != 0x00000000 jump masq-bit-5"), "{text}");
    ok(call("portmap", "DEL", host, Some(ctr), &conf).run());

    // What cannot be translated is refused, naming the key.
    conf["conditionsV4"] = json!(["-m", "addrtype", "--dst-type", "LOCAL"]);
    let err = call("portmap", "ADD", host, Some(ctr), &conf).run().error();
    assert_eq!(err.code, 2);
    assert!(err.msg.contains("conditionsV4"), "{}", err.msg);
}

#[test]
fn podman_default_chain_add_check_del() {
    let w = World::new();
    let (host, ctr) = (w.host(), w.container());
    let data = tempfile::tempdir().unwrap();
    let net = |plugin: Value, prev: Option<&Value>| {
        let mut c = plugin;
        c["cniVersion"] = json!("0.4.0");
        c["name"] = json!("podman");
        if let Some(prev) = prev {
            c["prevResult"] = prev.clone();
        }
        c
    };
    let bridge = json!({"type": "bridge", "bridge": "cnm4", "isGateway": true, "ipMasq": false,
        "hairpinMode": true, "ipam": {"type": "static", "addresses": [{"address": "10.95.0.2/24"}],
        "routes": [{"dst": "0.0.0.0/0"}]}});
    let portmap = json!({"type": "portmap", "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}});
    let tuning = json!({"type": "tuning", "dataDir": data.path()});

    let r1 = add("bridge", host, ctr, &net(bridge.clone(), None));
    let r2 = add("portmap", host, ctr, &net(portmap.clone(), Some(&r1)));
    let r3 = add("tuning", host, ctr, &net(tuning.clone(), Some(&r2)));
    let _s = server(ctr, "10.95.0.2:80", false);
    tcp_ok(&w.outside, "192.168.91.1:8080");
    tcp_ok(ctr, "192.168.91.1:8080");
    for plugin in [&bridge, &portmap, &tuning] {
        let name = plugin["type"].as_str().unwrap();
        ok(call(name, "CHECK", host, Some(ctr), &net(plugin.clone(), Some(&r3))).run());
    }
    for plugin in [&tuning, &portmap, &bridge] {
        let name = plugin["type"].as_str().unwrap();
        ok(call(name, "DEL", host, Some(ctr), &net(plugin.clone(), Some(&r3))).run());
    }
    tcp_fails(&w.outside, "192.168.91.1:8080");
    assert!(!w.nft_text().contains("chain cni-"), "{}", w.nft_text());
}
