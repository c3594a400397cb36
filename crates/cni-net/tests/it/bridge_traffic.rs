//! Real TCP/UDP traffic between container namespaces through a bridge in a host namespace,
//! plus sysctls set per namespace. Needs root.

use std::net::SocketAddr;
use std::time::Duration;

use cni_net::netlink::{AddressFlags, BridgeOptions, IpFamily, LinkCondition, LinkSpec, Route, VethSpec};
use cni_net::sysctl;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, udp_echo, udp_echo_server};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Wires container `n` to bridge `cntbr0` in the host: host end `cntv<n>`, container `eth0`
/// with `10.77.0.<10+n>/24` and `fd77::<10+n>/64`, default routes via the bridge.
fn attach(host: &TestNetns, container: &TestNetns, n: u32, bridge_index: u32) {
    let mut host_nl = host.netlink().unwrap();
    let mut container_nl = container.netlink().unwrap();
    let host_end = host_nl
        .add_veth(&VethSpec {
            link: LinkSpec::new(format!("cntv{n}")),
            peer: LinkSpec::new("eth0").netns(container.netns()),
        })
        .unwrap()
        .unwrap();
    host_nl.set_link_master(host_end.index, bridge_index).unwrap();
    host_nl.set_link_up(host_end.index).unwrap();
    let eth0 = container_nl.require_link("eth0").unwrap();
    container_nl
        .add_address(eth0.index, format!("10.77.0.{}/24", 10 + n).parse().unwrap(), AddressFlags::empty())
        .unwrap();
    // NODAD: the address must not spend 1-2 s in IPv6 DAD before traffic can flow.
    container_nl
        .add_address(eth0.index, format!("fd77::{}/64", 10 + n).parse().unwrap(), AddressFlags::Nodad)
        .unwrap();
    container_nl.set_link_up(eth0.index).unwrap();
    container_nl.wait_for_link(eth0.index, LinkCondition::Carrier, TIMEOUT).unwrap();
    container_nl
        .add_route(&Route::default_route(IpFamily::V4).gateway("10.77.0.1".parse().unwrap()))
        .unwrap();
}

#[test]
fn tcp_and_udp_echo_between_containers_through_a_bridge() {
    let net = HostAndContainers::new(2).unwrap();
    let mut host_nl = net.host.netlink().unwrap();
    let bridge = host_nl.add_bridge(&LinkSpec::new("cntbr0"), &BridgeOptions::default()).unwrap().unwrap();
    host_nl.add_address(bridge.index, "10.77.0.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    host_nl.set_link_up(bridge.index).unwrap();
    sysctl::disable_ipv6_dad(net.host.netns(), "cntbr0").unwrap();
    for (n, container) in net.containers.iter().enumerate() {
        attach(&net.host, container, n as u32, bridge.index);
    }

    let (first, second) = (&net.containers[0], &net.containers[1]);
    let tcp = tcp_echo_server(second.netns(), "10.77.0.11:0".parse().unwrap()).unwrap();
    let udp = udp_echo_server(second.netns(), "[fd77::11]:0".parse().unwrap()).unwrap();
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();

    // container -> container across the bridge, v4 TCP and v6 UDP.
    tcp_echo(first.netns(), tcp.local_addr(), &payload, TIMEOUT).unwrap();
    udp_echo(first.netns(), udp.local_addr(), b"ping over v6", TIMEOUT).unwrap();
    // host -> container via the bridge address.
    tcp_echo(net.host.netns(), tcp.local_addr(), b"from the host", TIMEOUT).unwrap();

    // Nothing listens on this port: the check must fail, not pass vacuously.
    let closed: SocketAddr = "10.77.0.11:9".parse().unwrap();
    assert!(tcp_echo(first.netns(), closed, b"x", Duration::from_secs(1)).is_err());
    // The server is unreachable from a namespace that is not wired up.
    let stranger = TestNetns::new().unwrap();
    assert!(tcp_echo(stranger.netns(), tcp.local_addr(), b"x", Duration::from_secs(1)).is_err());
}

#[test]
fn sysctls_change_only_the_target_namespace() {
    let ns = TestNetns::new().unwrap();
    let root_forwarding = sysctl::read("net.ipv4.ip_forward").unwrap();
    sysctl::enable_ipv4_forwarding(ns.netns()).unwrap();
    sysctl::enable_ipv6_forwarding(ns.netns()).unwrap();
    assert_eq!(sysctl::read_in(ns.netns(), "net.ipv4.ip_forward").unwrap(), "1");
    assert_eq!(sysctl::read_in(ns.netns(), "net/ipv6/conf/all/forwarding").unwrap(), "1");
    assert_eq!(sysctl::read("net.ipv4.ip_forward").unwrap(), root_forwarding);

    // Interface names with dots: the dotted key form must still find them.
    let mut nl = ns.netlink().unwrap();
    nl.add_bridge(&LinkSpec::new("cnt.br.0"), &BridgeOptions::default()).unwrap();
    sysctl::disable_ipv6_dad(ns.netns(), "cnt.br.0").unwrap();
    assert_eq!(sysctl::read_in(ns.netns(), "net.ipv6.conf.cnt.br.0.accept_dad").unwrap(), "0");
    sysctl::write_in(ns.netns(), "net.ipv4.conf.cnt.br.0.forwarding", "0").unwrap();
    assert_eq!(sysctl::read_in(ns.netns(), "net/ipv4/conf/cnt.br.0/forwarding").unwrap(), "0");
    let err = sysctl::read_in(ns.netns(), "net.ipv4.conf.cntmissing.forwarding").unwrap_err();
    assert!(err.is_not_found(), "{err}");
}
