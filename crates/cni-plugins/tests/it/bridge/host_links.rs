//! What bridge does to the links it leaves on the host and to the container's interface
//! beyond addressing: no host-side link learns from a container's router advertisements
//! (the reference's fix for CVE-2020-10749), and the container's interface announces its
//! address when it comes up (arp_notify), as the reference's does.

use crate::common::hostile_router;

use super::{add, conf, PREFIX};
use cni_testkit::ns::HostAndContainers;
use serde_json::json;

#[test]
fn a_container_advertising_itself_as_ipv6_router_changes_nothing_on_the_host() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    hostile_router::enable_ipv6(&env.host);
    let container = &env.containers[0];
    // An IPv4-only network: nothing of IPv6 on the host is CNI's, so nothing may change.
    let result =
        add("bridge", &env.host, container, &conf("1.0.0", "cnbra", json!([{"address": "10.69.0.2/24"}])));
    let host_veth = result["interfaces"][1]["name"].as_str().unwrap();
    let _router = hostile_router::advertise(container, "eth0");
    // The bridge is what hears the container (its ports pass frames up to it).
    hostile_router::wait_for_advertisements(&env.host, "cnbra");
    let planted = hostile_router::planted(&env.host);
    assert!(planted.is_empty(), "the container's advertisement configured the host: {planted:?}");
    for link in ["cnbra", host_veth] {
        assert_eq!(hostile_router::accept_ra(&env.host, link), "0", "accept_ra on {link}");
    }
}

#[test]
fn a_bridge_that_was_already_there_stops_accepting_advertisements_when_used() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    hostile_router::enable_ipv6(&env.host);
    let made = env.host.command("ip").args(["link", "add", "cnbold", "type", "bridge"]).status().unwrap();
    assert!(made.success());
    assert_eq!(hostile_router::accept_ra(&env.host, "cnbold"), "1", "the kernel's default, to begin with");
    add(
        "bridge",
        &env.host,
        &env.containers[0],
        &conf("1.0.0", "cnbold", json!([{"address": "10.69.1.2/24"}])),
    );
    assert_eq!(hostile_router::accept_ra(&env.host, "cnbold"), "0");
}

#[test]
fn the_container_interface_announces_its_address_on_link_up() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let container = &env.containers[0];
    add("bridge", &env.host, container, &conf("1.0.0", "cnbarp", json!([{"address": "10.69.2.2/24"}])));
    let value = cni_net::sysctl::read_in(container.netns(), "net/ipv4/conf/eth0/arp_notify").unwrap();
    assert_eq!(value, "1");
}
