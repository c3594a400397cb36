//! Addresses, routes (incl. multipath and other tables), neighbours and rules on the real
//! kernel, checked by netlink and by `ip -j` inside the namespace. Needs root.

use std::net::IpAddr;

use cni_net::netlink::{
    AddressFlags, IpFamily, LinkSpec, Neighbour, NextHop, Route, RouteScope, Rule, VethSpec, MAIN_TABLE,
};
use cni_net::{Link, MacAddr, Netlink};
use cni_testkit::ns::TestNetns;
use ipnet::IpNet;
use serde_json::Value;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A namespace with two up veth pairs (`cntv0`, `cntv1`) whose peers are up too.
fn namespace_with_links() -> (TestNetns, Netlink, Link, Link) {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let mut make = |name: &str| {
        let link = nl
            .add_veth(&VethSpec { link: LinkSpec::new(name), peer: LinkSpec::new(format!("{name}p")) })
            .unwrap()
            .unwrap();
        let peer = nl.require_link(&format!("{name}p")).unwrap();
        nl.set_link_up(link.index).unwrap();
        nl.set_link_up(peer.index).unwrap();
        link
    };
    let first = make("cntv0");
    let second = make("cntv1");
    (ns, nl, first, second)
}

#[test]
fn addresses_are_added_listed_and_deleted() {
    let (ns, mut nl, link, _) = namespace_with_links();
    nl.add_address(link.index, net("10.88.0.2/24"), AddressFlags::empty()).unwrap();
    nl.add_address(link.index, net("fd00:88::2/64"), AddressFlags::Nodad).unwrap();
    nl.add_address(link.index, net("10.88.1.2/24"), AddressFlags::Noprefixroute).unwrap();

    let err = nl.add_address(link.index, net("10.88.0.2/24"), AddressFlags::empty()).unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    let v4 = nl.addresses(Some(link.index), Some(IpFamily::V4)).unwrap();
    let v4: Vec<String> = v4.iter().map(|a| a.address.to_string()).collect();
    assert_eq!(v4, ["10.88.0.2/24", "10.88.1.2/24"]);
    let v6 = nl.addresses(Some(link.index), Some(IpFamily::V6)).unwrap();
    let global = v6.iter().find(|a| a.address == net("fd00:88::2/64")).expect("v6 address listed");
    assert!(global.flags.contains(AddressFlags::Nodad));
    assert!(!global.flags.contains(AddressFlags::Tentative), "nodad: usable at once");

    // Oracle: ip sees the addresses with their flags, and no prefix route for noprefixroute.
    let oracle = ns.ip_json(&["addr", "show", "dev", "cntv0"]);
    let infos = oracle[0]["addr_info"].as_array().unwrap();
    let find = |local: &str| {
        infos
            .iter()
            .find(|info| info["local"] == local)
            .unwrap_or_else(|| panic!("{local} missing in {oracle}"))
    };
    assert_eq!(find("10.88.0.2")["prefixlen"], 24);
    assert_eq!(find("10.88.0.2")["broadcast"], "10.88.0.255");
    assert_eq!(find("fd00:88::2")["nodad"], true);
    assert_eq!(find("10.88.1.2")["noprefixroute"], true);
    let routes = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).unwrap();
    assert!(routes.iter().any(|r| r.destination == net("10.88.0.0/24")));
    assert!(!routes.iter().any(|r| r.destination == net("10.88.1.0/24")));

    nl.delete_address(link.index, net("10.88.0.2/24")).unwrap();
    let err = nl.delete_address(link.index, net("10.88.0.2/24")).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let left = nl.addresses(None, Some(IpFamily::V4)).unwrap();
    assert!(!left.iter().any(|a| a.address == net("10.88.0.2/24")));
    assert!(left.iter().any(|a| a.address == net("127.0.0.1/8")), "lo is listed too");
}

fn route_json(ns: &TestNetns, args: &[&str], dst: &str) -> Value {
    let routes = ns.ip_json(args);
    routes
        .as_array()
        .unwrap()
        .iter()
        .find(|route| route["dst"] == dst)
        .unwrap_or_else(|| panic!("route {dst} missing in {routes}"))
        .clone()
}

/// The route to `dst` in `routes`, as netlink read it back.
fn route_to(routes: &[Route], dst: &str) -> Route {
    routes
        .iter()
        .find(|r| r.destination == net(dst))
        .unwrap_or_else(|| panic!("{dst} missing in {routes:?}"))
        .clone()
}

/// The oracle for `routes_single_multipath_tables_and_replace`: iproute2's view of the
/// routes it added (gateway, metric, nexthop weights, onlink, another table, mtu).
fn iproute2_shows_the_routes_added(ns: &TestNetns) {
    let oracle = route_json(ns, &["route", "show"], "10.50.0.0/16");
    assert_eq!(oracle["gateway"], "10.1.0.1");
    assert_eq!(oracle["metric"], 100);
    assert_eq!(oracle["dev"], "cntv0");
    let oracle = route_json(ns, &["route", "show"], "10.80.0.0/16");
    let hops = oracle["nexthops"].as_array().unwrap();
    assert_eq!(hops.len(), 2);
    assert_eq!(hops[1]["weight"], 3);
    let oracle = route_json(ns, &["route", "show"], "10.60.0.0/16");
    assert!(oracle["flags"].as_array().unwrap().iter().any(|f| f == "onlink"));
    let oracle = route_json(ns, &["route", "show", "table", "1000"], "default");
    assert_eq!(oracle["gateway"], "10.2.0.1");
    let oracle = route_json(ns, &["route", "show"], "10.70.0.0/24");
    assert_eq!(oracle["metrics"][0]["mtu"], 1300, "{oracle}");
}

#[test]
fn routes_single_multipath_tables_and_replace() {
    let (ns, mut nl, first, second) = namespace_with_links();
    nl.add_address(first.index, net("10.1.0.2/24"), AddressFlags::empty()).unwrap();
    nl.add_address(second.index, net("10.2.0.2/24"), AddressFlags::empty()).unwrap();
    nl.add_address(first.index, net("fd00:1::2/64"), AddressFlags::Nodad).unwrap();

    // Plain route with gateway and metric; a default route; an onlink gateway.
    let plain = Route::new(net("10.50.0.0/16")).gateway(ip("10.1.0.1")).priority(100);
    nl.add_route(&plain).unwrap();
    assert!(nl.add_route(&plain).unwrap_err().is_already_exists());
    nl.add_route(&Route::default_route(IpFamily::V4).gateway(ip("10.1.0.1"))).unwrap();
    nl.add_route(&Route::new(net("10.60.0.0/16")).gateway(ip("192.168.250.1")).oif(second.index).onlink())
        .unwrap();
    nl.add_route(&Route::new(net("fd00:99::/64")).gateway(ip("fd00:1::1")).oif(first.index)).unwrap();
    // Link-scope route without gateway, mtu and advmss metrics.
    let mut scoped = Route::new(net("10.70.0.0/24")).oif(second.index);
    scoped.mtu = Some(1300);
    scoped.advmss = Some(1200);
    nl.add_route(&scoped).unwrap();

    // Multipath (ECMP) with weights.
    let mut heavy = NextHop::via(ip("10.2.0.1"), second.index);
    heavy.weight = 3;
    let multipath =
        Route::new(net("10.80.0.0/16")).nexthops(vec![NextHop::via(ip("10.1.0.1"), first.index), heavy]);
    nl.add_route(&multipath).unwrap();

    // A route in a non-main table.
    let other_table = Route::default_route(IpFamily::V4).gateway(ip("10.2.0.1")).table(1000);
    nl.add_route(&other_table).unwrap();

    let main = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).unwrap();
    let read = route_to(&main, "10.50.0.0/16");
    assert_eq!(read.gateway, Some(ip("10.1.0.1")));
    assert_eq!(read.priority, Some(100));
    assert_eq!(read.oif, Some(first.index));
    assert!(route_to(&main, "0.0.0.0/0").is_default());
    assert!(route_to(&main, "10.60.0.0/16").onlink);
    let read = route_to(&main, "10.70.0.0/24");
    assert_eq!(read.scope, Some(RouteScope::Link));
    assert_eq!((read.mtu, read.advmss), (Some(1300), Some(1200)));
    let read = route_to(&main, "10.80.0.0/16");
    assert_eq!(read.nexthops.len(), 2, "{read:?}");
    assert_eq!(read.nexthops[1].weight, 3);
    assert!(!main.iter().any(|r| r.table == 1000));
    let table = nl.routes(IpFamily::V4, Some(1000)).unwrap();
    assert_eq!(table.len(), 1);
    assert_eq!(table[0].gateway, Some(ip("10.2.0.1")));
    let v6 = nl.routes(IpFamily::V6, Some(MAIN_TABLE)).unwrap();
    assert_eq!(route_to(&v6, "fd00:99::/64").gateway, Some(ip("fd00:1::1")));

    iproute2_shows_the_routes_added(&ns);

    // Replace moves the route to another gateway in place.
    let replaced = Route::new(net("10.50.0.0/16")).gateway(ip("10.2.0.1")).priority(100);
    nl.replace_route(&replaced).unwrap();
    // The old gateway no longer matches anything.
    assert!(nl.delete_route(&plain).unwrap_err().is_not_found());
    let main = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).unwrap();
    assert_eq!(route_to(&main, "10.50.0.0/16").gateway, Some(ip("10.2.0.1")));

    // Delete, and deleting again is "not found".
    for route in [&replaced, &multipath, &other_table] {
        nl.delete_route(route).unwrap();
        let err = nl.delete_route(route).unwrap_err();
        assert!(err.is_not_found(), "{err}");
    }
    let main = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).unwrap();
    assert!(!main.iter().any(|r| r.destination == net("10.50.0.0/16")));
    assert!(!main.iter().any(|r| r.destination == net("10.80.0.0/16")));
    assert!(nl.routes(IpFamily::V4, Some(1000)).unwrap().is_empty());
}

#[test]
fn neighbours_are_added_listed_and_deleted() {
    let (ns, mut nl, link, _) = namespace_with_links();
    nl.add_address(link.index, net("10.3.0.2/24"), AddressFlags::empty()).unwrap();
    let mac: MacAddr = "02:00:00:00:03:01".parse().unwrap();
    let entry = Neighbour::permanent(link.index, ip("10.3.0.1"), mac);
    nl.replace_neighbour(&entry).unwrap();
    nl.replace_neighbour(&entry).unwrap(); // replace is idempotent
    let v6 = Neighbour::permanent(link.index, ip("fd00:3::1"), mac);
    nl.replace_neighbour(&v6).unwrap();

    let listed = nl.neighbours(IpFamily::V4, Some(link.index)).unwrap();
    assert_eq!(listed, vec![entry.clone()]);
    assert!(nl
        .neighbours(IpFamily::V6, None)
        .unwrap()
        .iter()
        .any(|n| n.address == ip("fd00:3::1") && n.mac == Some(mac)));

    let oracle = ns.ip_json(&["neigh", "show", "dev", "cntv0"]);
    let found =
        oracle.as_array().unwrap().iter().find(|n| n["dst"] == "10.3.0.1").expect("neighbour in ip output");
    assert_eq!(found["lladdr"], mac.to_string());
    assert!(found["state"].as_array().unwrap().iter().any(|s| s == "PERMANENT"));

    nl.delete_neighbour(link.index, ip("10.3.0.1")).unwrap();
    assert!(nl.delete_neighbour(link.index, ip("10.3.0.1")).unwrap_err().is_not_found());
    assert!(nl.neighbours(IpFamily::V4, Some(link.index)).unwrap().is_empty());
}

#[test]
fn policy_rules_are_added_listed_and_deleted() {
    let ns = TestNetns::new().unwrap();
    let mut nl = ns.netlink().unwrap();
    let mut rule = Rule::from_source(net("10.4.0.5/32"), 100);
    rule.priority = Some(1000);
    nl.add_rule(&rule).unwrap();
    assert!(nl.add_rule(&rule).unwrap_err().is_already_exists());
    let mut to_rule = Rule::from_source(net("fd00:4::/64"), 101);
    to_rule.from = None;
    to_rule.to = Some(net("fd00:4::/64"));
    nl.add_rule(&to_rule).unwrap();

    let v4 = nl.rules(IpFamily::V4).unwrap();
    assert!(v4.contains(&rule), "{v4:?}");
    assert!(v4.iter().any(|r| r.table == MAIN_TABLE), "default rules are listed");
    let v6 = nl.rules(IpFamily::V6).unwrap();
    assert!(v6.iter().any(|r| r.to == to_rule.to && r.table == 101), "{v6:?}");

    let oracle = ns.ip_json(&["rule", "show"]);
    let found = oracle.as_array().unwrap().iter().find(|r| r["priority"] == 1000).expect("rule in ip output");
    assert_eq!(found["src"], "10.4.0.5");
    assert_eq!(found["table"], "100");

    nl.delete_rule(&rule).unwrap();
    assert!(nl.delete_rule(&rule).unwrap_err().is_not_found());
    assert!(!nl.rules(IpFamily::V4).unwrap().contains(&rule));
}
