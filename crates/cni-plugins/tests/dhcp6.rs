//! DHCPv6 (and dual-stack) through the dhcp plugin and its daemon, against real servers in
//! throwaway namespaces: dnsmasq and kea-dhcp6. Containers are attached by the bridge
//! plugin (and macvlan) with dhcp IPAM and `"families"` set.

mod common;
mod dhcp_support;

use std::time::Duration;

use cni_testkit::ns::TestNetns;
use common::call;
use dhcp_support::{wait_for, Network, BRIDGE};
use serde_json::{json, Value};

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
