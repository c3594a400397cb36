//! `ptp` on the real kernel: routed veth pairs, traffic from container to host.

use crate::common;
use crate::common::hostile_router;

use cni_net::netlink::IpFamily;
use cni_testkit::ns::HostAndContainers;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, ok, wait_link_gone};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const PREFIX: &str = "cnp";

fn conf(version: &str, addresses: Value) -> Value {
    json!({"cniVersion": version, "name": "ptpnet", "type": "ptp",
        "ipam": {"type": "static", "addresses": addresses, "routes": [{"dst": "0.0.0.0/0"}]}})
}

#[test]
fn container_reaches_the_host_and_routes_go_through_the_gateway() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let ra = add(
        "ptp",
        &env.host,
        a,
        &conf("1.0.0", json!([{"address": "10.80.0.2/24", "gateway": "10.80.0.1"}])),
    );
    add("ptp", &env.host, b, &conf("1.0.0", json!([{"address": "10.80.0.3/24", "gateway": "10.80.0.1"}])));
    assert_eq!(ra["interfaces"].as_array().unwrap().len(), 2);
    assert_eq!(ra["ips"][0]["interface"], 1);

    // Host: gateway /32 on the host end, /32 route to the container.
    let mut host = env.host.netlink().unwrap();
    let veth = host.require_link(ra["interfaces"][0]["name"].as_str().unwrap()).unwrap();
    let addrs: Vec<String> = host
        .addresses(Some(veth.index), Some(IpFamily::V4))
        .unwrap()
        .iter()
        .map(|a| a.address.to_string())
        .collect();
    assert_eq!(addrs, ["10.80.0.1/32"]);
    let host_routes = host.routes(IpFamily::V4, None).unwrap();
    assert!(host_routes
        .iter()
        .any(|r| r.destination.to_string() == "10.80.0.2/32" && r.oif == Some(veth.index)));

    // Container: no on-link subnet route; the subnet and default go via the gateway.
    let routes = a.netlink().unwrap().routes(IpFamily::V4, None).unwrap();
    let subnet = routes.iter().find(|r| r.destination.to_string() == "10.80.0.0/24").expect("subnet route");
    assert_eq!(subnet.gateway, Some("10.80.0.1".parse().unwrap()));
    assert!(routes.iter().any(|r| r.destination.to_string() == "10.80.0.1/32" && r.gateway.is_none()));

    let server_addr: SocketAddr = "10.80.0.1:7101".parse().unwrap();
    let _server = tcp_echo_server(env.host.netns(), server_addr).unwrap();
    tcp_echo(a.netns(), server_addr, b"ptp to host", Duration::from_secs(5)).unwrap();
    // Container to container is routed through the host.
    let to_b: SocketAddr = "10.80.0.3:7102".parse().unwrap();
    let _server_b = tcp_echo_server(b.netns(), to_b).unwrap();
    tcp_echo(a.netns(), to_b, b"routed via host", Duration::from_secs(5)).unwrap();
}

#[test]
fn ipv6_between_containers_works_right_after_add() {
    // Routed through the host: the host solicits the neighbour from the host end's
    // link-local address, which must not be tentative (DAD) when ADD returns.
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let v6 = |address: &str| {
        let mut c = conf("1.0.0", json!([{"address": address, "gateway": "fd80::1"}]));
        c["ipam"]["routes"] = json!([{"dst": "::/0"}]);
        c
    };
    add("ptp", &env.host, a, &v6("fd80::2/64"));
    let rb = add("ptp", &env.host, b, &v6("fd80::3/64"));
    let host_end = rb["interfaces"][0]["name"].as_str().unwrap();
    let shown = env.host.ip_json(&["-6", "addr", "show", "dev", host_end]);
    let addresses = shown[0]["addr_info"].as_array().unwrap();
    assert!(addresses.iter().all(|a| a.get("tentative").is_none()), "tentative after ADD: {shown}");
    let to_b: SocketAddr = "[fd80::3]:7103".parse().unwrap();
    let _server = tcp_echo_server(b.netns(), to_b).unwrap();
    tcp_echo(a.netns(), to_b, b"routed ipv6", Duration::from_secs(5)).unwrap();
}

#[test]
fn del_twice_and_without_netns_and_check_after_tampering() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut conf = conf("0.4.0", json!([{"address": "10.81.0.2/24", "gateway": "10.81.0.1"}]));
    let r = add("ptp", &env.host, c, &conf);
    assert_eq!(r["ips"][0]["version"], "4");
    conf["prevResult"] = r;
    ok(call("ptp", "CHECK", &env.host, Some(c), &conf).run());
    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    nl.delete_address(eth0.index, "10.81.0.2/24".parse().unwrap()).unwrap();
    let err = call("ptp", "CHECK", &env.host, Some(c), &conf).run().error();
    assert!(err.msg.contains("10.81.0.2/24"), "{}", err.msg);
    for _ in 0..2 {
        ok(call("ptp", "DEL", &env.host, Some(c), &conf).run());
    }
    ok(call("ptp", "DEL", &env.host, Some(c), &conf).unset("CNI_NETNS").run());
    assert!(nl.link_by_name("eth0").unwrap().is_none());
    let host_veth = conf["prevResult"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.get("sandbox").is_none())
        .unwrap();
    wait_link_gone(&env.host, host_veth["name"].as_str().unwrap());
}

#[test]
fn ptp_requires_ipam_and_a_gateway() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let no_ipam = json!({"cniVersion": "1.0.0", "name": "p", "type": "ptp"});
    assert_eq!(call("ptp", "ADD", &env.host, Some(&env.containers[0]), &no_ipam).run().error().code, 7);
    let no_gw = conf("1.0.0", json!([{"address": "10.82.0.2/24"}]));
    let err = call("ptp", "ADD", &env.host, Some(&env.containers[0]), &no_gw).run().error();
    assert!(err.msg.contains("gateway"), "{}", err.msg);
    assert!(env.containers[0].netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}

#[test]
fn result_in_the_0_2_layout() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let conf = conf("0.2.0", json!([{"address": "10.83.0.2/24", "gateway": "10.83.0.1"}]));
    let r = add("ptp", &env.host, c, &conf);
    assert_eq!(
        r,
        json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.83.0.2/24", "gateway": "10.83.0.1", "routes": [{"dst": "0.0.0.0/0"}]}})
    );
    let eth0 = c.netlink().unwrap().require_link("eth0").unwrap();
    let addrs = c.netlink().unwrap().addresses(Some(eth0.index), Some(IpFamily::V4)).unwrap();
    assert_eq!(addrs[0].address.to_string(), "10.83.0.2/24");
    ok(call("ptp", "DEL", &env.host, Some(c), &conf).run());
}

#[test]
fn configured_dns_wins_over_ipams_and_ipams_is_used_alone() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let ipam_dns = json!({"nameservers": ["10.81.0.53"], "search": ["ipam.example"]});
    let configured = json!({"nameservers": ["192.0.2.53"], "domain": "conf.example"});
    let mut both = conf("1.0.0", json!([{"address": "10.81.0.2/24", "gateway": "10.81.0.1"}]));
    both["ipam"]["dns"] = ipam_dns.clone();
    both["dns"] = configured.clone();
    let r = add("ptp", &env.host, &env.containers[0], &both);
    assert_eq!(r["dns"], configured);
    let mut ipam_only = conf("1.0.0", json!([{"address": "10.81.0.3/24", "gateway": "10.81.0.1"}]));
    ipam_only["ipam"]["dns"] = ipam_dns.clone();
    let r = add("ptp", &env.host, &env.containers[1], &ipam_only);
    assert_eq!(r["dns"], ipam_dns);
}

#[test]
fn a_container_advertising_itself_as_ipv6_router_changes_nothing_on_the_host() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    hostile_router::enable_ipv6(&env.host);
    let container = &env.containers[0];
    // An IPv4-only network: nothing of IPv6 on the host is CNI's, so nothing may change.
    let result = add(
        "ptp",
        &env.host,
        container,
        &conf("1.0.0", json!([{"address": "10.82.0.2/24", "gateway": "10.82.0.1"}])),
    );
    let host_veth = result["interfaces"][0]["name"].as_str().unwrap();
    let _router = hostile_router::advertise(container, "eth0");
    hostile_router::wait_for_advertisements(&env.host, host_veth);
    let planted = hostile_router::planted(&env.host);
    assert!(planted.is_empty(), "the container's advertisement configured the host: {planted:?}");
    assert_eq!(hostile_router::accept_ra(&env.host, host_veth), "0");
}
