//! The router is untrusted: prefixes of a length SLAAC does not use, zero lifetimes, a
//! flood of prefixes on an interface whose namespace sets no bound, no default router.
//! The plugin reports only usable autoconfigured /64 addresses, bounded in number, or
//! fails closed with code 11.

use super::support;
use crate::common;

use common::{add, call};
use ipnet::Ipv6Net;
use serde_json::{json, Value};
use support::*;

/// The reported addresses, each checked against the kernel: on eth0, /64, in `within`.
fn reported_addresses(result: &Value, container: &cni_testkit::ns::TestNetns, within: &str) -> Vec<Ipv6Net> {
    let within: Ipv6Net = within.parse().unwrap();
    let on_eth0: Vec<String> = global_addresses(container, "eth0")
        .iter()
        .map(|a| a["local"].as_str().unwrap().to_string())
        .collect();
    result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ip| {
            let address: Ipv6Net = ip["address"].as_str().unwrap().parse().unwrap();
            assert_eq!(address.prefix_len(), 64, "{result}");
            assert!(within.contains(&address.addr()), "{address} outside {within}");
            assert!(on_eth0.contains(&address.addr().to_string()), "{address} is not on eth0: {on_eth0:?}");
            address
        })
        .collect()
}

/// radvd options advertising only prefixes SLAAC cannot use: a /48, lifetimes 0, and a
/// preferred lifetime of 0 (deprecated at birth).
fn unusable_prefixes() -> Vec<String> {
    vec![
        "  AdvDefaultLifetime 1800;\n".to_string(),
        prefix("2001:db8:5100::/48", ""),
        prefix("2001:db8:51:1::/64", "AdvValidLifetime 0; AdvPreferredLifetime 0;"),
        prefix("2001:db8:51:2::/64", "AdvValidLifetime 3600; AdvPreferredLifetime 0;"),
    ]
}

/// A /48, lifetimes 0 and a preferred lifetime of 0 (deprecated at birth): nothing usable,
/// so code 11; the details show that the advertisement came and what it made.
#[test]
fn only_unusable_prefixes_fail_closed_with_code_11() {
    cni_testkit::ns::require_root();
    let options = unusable_prefixes().concat();
    let lan = bridge_lan(1, Some(&options));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let conf = bridge_conf(json!({"type": "slaac", "timeout": 8}));
    let out = call("bridge", "ADD", host, Some(container), &conf).run();
    let error = out.error();
    assert_eq!(error.code, 11, "{}", out.stdout);
    // The deprecated address was made and refused; nothing else was made.
    assert!(
        error.details.contains("2001:db8:51:2:") && error.details.contains("Unusable"),
        "{}",
        error.details
    );
    assert!(!error.details.contains("2001:db8:51:1:"), "{}", error.details);
    assert!(!error.details.contains("2001:db8:5100:"), "{}", error.details);
    common::wait_link_gone(container, "eth0");
}

/// Among hostile prefixes, the one valid /64 is the only address reported.
#[test]
fn a_valid_prefix_among_hostile_ones_is_the_only_one_reported() {
    cni_testkit::ns::require_root();
    let options = [unusable_prefixes(), vec![prefix(BRIDGE_PREFIX, "")]].concat().concat();
    let lan = bridge_lan(1, Some(&options));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let result = add("bridge", host, container, &bridge_conf(json!({"type": "slaac"})));
    assert_eq!(reported_addresses(&result, container, BRIDGE_PREFIX).len(), 1, "{result}");
}

/// 40 prefixes in one advertisement, and a container namespace whose default sets no
/// bound on autoconfigured addresses: the plugin bounds the interface to 16 (link-local
/// included), and reports only what is on it.
#[test]
fn a_flood_of_prefixes_is_bounded() {
    cni_testkit::ns::require_root();
    let prefixes: String = (1..=40).map(|i| prefix(&format!("2001:db8:51:{i:x}::/64"), "")).collect();
    let lan = bridge_lan(1, Some(&format!("  AdvDefaultLifetime 1800;\n{prefixes}")));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    cni_net::sysctl::write_in(container.netns(), "net/ipv6/conf/default/max_addresses", "0").unwrap();
    let result = add("bridge", host, container, &bridge_conf(json!({"type": "slaac"})));
    let reported = reported_addresses(&result, container, "2001:db8:51::/48");
    assert!(!reported.is_empty() && reported.len() <= 15, "{} reported: {result}", reported.len());
    let max = cni_net::sysctl::read_in(container.netns(), "net/ipv6/conf/eth0/max_addresses").unwrap();
    assert_eq!(max, "16");
    assert!(global_addresses(container, "eth0").len() <= 15);
}

/// A router advertising with router lifetime 0 is no default router: its prefix gives an
/// address, reported without gateway or default route.
#[test]
fn a_router_with_lifetime_0_is_no_gateway() {
    cni_testkit::ns::require_root();
    let options = format!("  AdvDefaultLifetime 0;\n{}", prefix(BRIDGE_PREFIX, ""));
    let lan = bridge_lan(1, Some(&options));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let result = add("bridge", host, container, &bridge_conf(json!({"type": "slaac"})));
    assert_eq!(reported_addresses(&result, container, BRIDGE_PREFIX).len(), 1, "{result}");
    assert_eq!(result["ips"][0].get("gateway"), None, "{result}");
    assert_eq!(result.get("routes"), None, "{result}");
    assert_eq!(default_routes(container), Vec::<Value>::new());
}
