//! DHCPv6 (and dual-stack) through the dhcp plugin and its daemon, against real servers in
//! throwaway namespaces: dnsmasq and kea-dhcp6. Containers are attached by the bridge
//! plugin (and macvlan) with dhcp IPAM and `"families"` set.

use crate::common;
use crate::support;

use std::time::Duration;

use cni_testkit::ns::TestNetns;
use common::call;
use serde_json::{json, Value};
use support::{wait_for, Network, BRIDGE};

const PREFIX: &str = "d6";

/// A bridge configuration leasing from the given families, v6 addresses as /64.
fn conf(net: &Network, families: &[u8]) -> Value {
    json!({"cniVersion": "1.1.0", "name": "d6net", "type": "bridge", "bridge": BRIDGE,
           "ipam": {"type": "dhcp", "daemonSocketPath": net.socket(), "families": families,
                    "ipv6PrefixLength": 64}})
}

fn add(net: &Network, container: &TestNetns, conf: &Value) -> Value {
    let out = call(conf["type"].as_str().unwrap(), "ADD", &net.host, Some(container), conf).run();
    assert!(
        out.success(),
        "ADD failed: {}\n{}\ndaemon log:\n{}\nserver logs:\n{}{}",
        out.stdout,
        out.stderr,
        net.log("daemon.log"),
        net.log("dnsmasq.log"),
        net.log("kea6.log")
    );
    out.json()
}

fn run(net: &Network, verb: &str, container: &TestNetns, conf: &Value) -> cni_testkit::runner::PluginOutput {
    call(conf["type"].as_str().unwrap(), verb, &net.host, Some(container), conf).run()
}

/// The result's addresses of one family ("4" or "6").
fn addresses(result: &Value, v6: bool) -> Vec<String> {
    result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ip| ip["address"].as_str().unwrap().to_string())
        .filter(|a| a.contains(':') == v6)
        .collect()
}

fn bare(address: &str) -> String {
    address.split('/').next().unwrap().to_string()
}

/// The global IPv6 addresses on the container's eth0, as `addr/prefix`.
fn v6_on_interface(container: &TestNetns) -> Vec<String> {
    let json = container.ip_json(&["-6", "addr", "show", "dev", "eth0", "scope", "global"]);
    json.as_array()
        .into_iter()
        .flatten()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| Some(format!("{}/{}", a["local"].as_str()?, a["prefixlen"])))
        .collect()
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = result.clone();
    c
}

#[test]
fn dnsmasq_lease_with_dns_then_release_and_same_address_again() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq6();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let conf = conf(&net, &[6]);

    let result = add(&net, &container, &conf);
    let v6 = addresses(&result, true);
    assert_eq!(v6.len(), 1, "{result}");
    assert!(addresses(&result, false).is_empty(), "no v4 lease asked for: {result}");
    assert!(v6[0].starts_with("fd77::") && v6[0].ends_with("/64"), "{result}");
    assert!(result["ips"][0].get("gateway").is_none(), "DHCPv6 has no gateway: {result}");
    assert_eq!(result["dns"], json!({"nameservers": ["fd77::53"], "search": ["six.example"]}));
    assert_eq!(v6_on_interface(&container), v6, "the bridge plugin put the lease on eth0");
    assert!(net.log("dnsmasq.leases").contains(&bare(&v6[0])), "{}", net.log("dnsmasq.leases"));
    let records = net.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].ends_with("+eth0+6.json"), "{records:?}");

    assert!(run(&net, "CHECK", &container, &with_prev(&conf, &result)).success());
    let status = net.status();
    assert_eq!((status.leases.len(), status.leases[0].state.as_str()), (1, "bound"), "{status:?}");

    let del = run(&net, "DEL", &container, &conf);
    assert!(del.success(), "DEL: {}", del.stdout);
    wait_for("dnsmasq to see the RELEASE", Duration::from_secs(10), || {
        net.log("dnsmasq.log").contains("DHCPRELEASE(srv0)")
    });
    assert!(net.records().is_empty(), "{:?}", net.records());
    let again = call("bridge", "DEL", &net.host, None, &conf).container_id(container.name()).run();
    assert!(again.success(), "second DEL: {}", again.stdout);

    // The attachment's DUID is the same: the server hands the same address back.
    let second = add(&net, &container, &conf);
    assert_eq!(addresses(&second, true), v6);
}

/// How many kea log lines name `address` and contain `what` (kea logs one line per
/// allocation, renewal, release).
fn kea_lines(net: &Network, what: &str, address: &str) -> usize {
    net.log("kea6.log").lines().filter(|l| l.contains(what) && l.contains(&format!("{address} "))).count()
}

#[test]
fn kea_renewals_survive_kill_9_and_a_new_server_is_reached_by_rebind() {
    let net = Network::new(PREFIX);
    let mut server = net.kea6(12, 8, 2, 5, 16);
    let mut daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let conf = conf(&net, &[6]);
    let result = add(&net, &container, &conf);
    let v6 = addresses(&result, true);
    assert!(v6[0].starts_with("fd77::1") && v6[0].ends_with("/64"), "{result}");
    assert_eq!(result["dns"], json!({"nameservers": ["fd77::53"], "search": ["k6.example"]}));
    let ip = bare(&v6[0]);
    wait_for("a RENEW at the server", Duration::from_secs(20), || {
        kea_lines(&net, "DHCP6_LEASE_RENEW", &ip) >= 1
    });

    // No graceful shutdown: the lease must come back from the state directory.
    daemon.kill();
    let seen = kea_lines(&net, "DHCP6_LEASE_RENEW", &ip);
    let _daemon = net.daemon();
    wait_for("a RENEW by the restarted daemon", Duration::from_secs(20), || {
        kea_lines(&net, "DHCP6_LEASE_RENEW", &ip) > seen
    });
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(status.leases[0].address, v6[0]);
    assert!(run(&net, "CHECK", &container, &with_prev(&conf, &result)).success());

    // A new server (another DUID, the same lease file) ignores RENEWs naming the old one:
    // the lease lives on through REBIND at T2.
    server.kill();
    let before = kea_lines(&net, "DHCP6_LEASE_RENEW", &ip);
    let _server = net.kea6(12, 8, 2, 5, 16);
    wait_for("the daemon to rebind", Duration::from_secs(30), || {
        net.log("daemon.log")
            .lines()
            .any(|l| l.contains("rebound a lease") && l.contains(&format!("lease={}", v6[0])))
    });
    // Any extension by the new server is a REBIND's: it drops RENEWs for another server.
    assert!(kea_lines(&net, "DHCP6_LEASE_RENEW", &ip) > before, "{}", net.log("kea6.log"));
    assert_eq!(net.status().leases[0].state, "bound");

    assert!(run(&net, "DEL", &container, &conf).success());
    wait_for("kea to see the RELEASE", Duration::from_secs(10), || {
        kea_lines(&net, "DHCP6_RELEASE_NA", &ip) >= 1
    });
    assert!(net.records().is_empty(), "{:?}", net.records());
}

#[test]
fn no_addresses_available_and_no_server_are_code_11_and_leave_nothing() {
    let net = Network::new(PREFIX);
    let mut server = net.kea6(60, 40, 20, 30, 1);
    let _daemon = net.daemon();
    let conf = conf(&net, &[6]);
    let first = TestNetns::with_prefix(PREFIX).unwrap();
    add(&net, &first, &conf);
    // The pool's one address is taken.
    let second = TestNetns::with_prefix(PREFIX).unwrap();
    let out = run(&net, "ADD", &second, &conf);
    assert!(!out.success(), "a second lease from a pool of one: {}", out.stdout);
    let err = out.error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("NoAddrsAvail") && err.msg.contains("DHCPv6"), "{}", err.msg);
    assert_eq!(net.records().len(), 1, "only the first lease: {:?}", net.records());

    server.kill();
    let third = TestNetns::with_prefix(PREFIX).unwrap();
    let out = run(&net, "ADD", &third, &conf);
    let err = out.error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("no DHCPv6 lease") && err.msg.contains("no answer"), "{}", err.msg);
    assert_eq!(net.records().len(), 1, "{:?}", net.records());
    let daemon_alive = net.status();
    assert!(daemon_alive.ok);
}

/// Dual-stack through the bridge plugin: one ADD, a DHCPv4 and a DHCPv6 lease from one
/// dnsmasq, both addresses on the interface, both released by one DEL.
#[test]
fn dual_stack_through_bridge() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq_dual();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let conf = conf(&net, &[6, 4]);
    let result = add(&net, &container, &conf);
    let (v4, v6) = (addresses(&result, false), addresses(&result, true));
    assert_eq!((v4.len(), v6.len()), (1, 1), "{result}");
    assert!(result["ips"][0]["address"].as_str().unwrap().starts_with("10.77.0."), "IPv4 first: {result}");
    assert_eq!(result["ips"][0]["gateway"], "10.77.0.1");
    assert_eq!(
        result["dns"],
        json!({"nameservers": ["10.77.0.53", "fd77::53"], "domain": "example.test",
               "search": ["a.example", "b.example", "six.example"]})
    );
    assert_eq!(v6_on_interface(&container), v6);
    let v4_on = container.ip_json(&["-4", "addr", "show", "dev", "eth0"]).to_string();
    assert!(v4_on.contains(&bare(&v4[0])), "{v4_on}");
    assert_eq!(net.records().len(), 2, "{:?}", net.records());
    assert!(run(&net, "CHECK", &container, &with_prev(&conf, &result)).success());
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": container.name(), "ifname": "eth0"}]);
    assert!(call("bridge", "GC", &net.host, None, &gc).run().success());
    assert_eq!(net.records().len(), 2, "GC kept the valid attachment's leases: {:?}", net.records());

    assert!(run(&net, "DEL", &container, &conf).success());
    wait_for("dnsmasq to see both releases", Duration::from_secs(10), || {
        let log = net.log("dnsmasq.log");
        // The v4 line names the address; the v6 one the client's DUID.
        log.contains(&format!("DHCPRELEASE(srv0) {}", bare(&v4[0])))
            && log.matches("DHCPRELEASE(srv0)").count() >= 2
    });
    assert!(net.records().is_empty(), "{:?}", net.records());
}

/// Dual-stack through macvlan on the test network's bridge; a failed DHCPv6 half (no v6
/// server) rolls the DHCPv4 lease back.
#[test]
fn dual_stack_through_macvlan_and_a_failed_half_rolls_back() {
    let net = Network::new(PREFIX);
    let mut server = net.dnsmasq_dual();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let mut conf = conf(&net, &[4, 6]);
    conf["type"] = json!("macvlan");
    conf["master"] = json!(BRIDGE);
    conf["mode"] = json!("bridge");
    let result = add(&net, &container, &conf);
    let (v4, v6) = (addresses(&result, false), addresses(&result, true));
    assert_eq!((v4.len(), v6.len()), (1, 1), "{result}");
    assert_eq!(v6_on_interface(&container), v6);
    // GC without the attachment in the valid list releases both of its leases.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    assert!(call("macvlan", "GC", &net.host, None, &gc).run().success());
    assert!(net.records().is_empty(), "{:?}", net.records());
    assert!(net.status().leases.is_empty());
    wait_for("dnsmasq to see both releases", Duration::from_secs(10), || {
        net.log("dnsmasq.log").matches("DHCPRELEASE(srv0)").count() >= 2
    });
    assert!(run(&net, "DEL", &container, &conf).success());

    // Only DHCPv4 now: the v6 half fails, and the v4 lease it got goes back.
    server.kill();
    let _v4_only = net.dnsmasq();
    let other = TestNetns::with_prefix(PREFIX).unwrap();
    let out = run(&net, "ADD", &other, &conf);
    assert!(!out.success(), "{}", out.stdout);
    assert_eq!(out.error().code, 11, "{:?}", out.error());
    assert!(net.records().is_empty(), "the v4 lease was kept: {:?}", net.records());
    assert!(net.status().leases.is_empty());
}

/// A container whose interfaces come up with IPv6 disabled has no link-local source for
/// DHCPv6: ADD says so (after a bounded wait) and keeps nothing.
#[test]
fn ipv6_disabled_in_the_container_is_a_clear_error() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq6();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let out =
        container.command("sysctl").args(["-qw", "net.ipv6.conf.default.disable_ipv6=1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(&net, "ADD", &container, &conf(&net, &[6]));
    assert!(!out.success(), "{}", out.stdout);
    assert!(out.error().msg.contains("no usable IPv6 link-local address"), "{:?}", out.error());
    assert!(net.records().is_empty(), "{:?}", net.records());
    assert!(net.status().leases.is_empty());
}
