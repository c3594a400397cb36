//! `sbr` through the installed multi-call binary. A veth pair joins a throwaway "host"
//! namespace (`cnuh0`, the gateway 10.78.0.1 / fd78::1) and a "container" namespace
//! (`cnu0`, 10.78.0.2 / fd78::2); rules and tables are read back by netlink and with
//! `ip -j` inside the container, and real UDP traffic shows the rule steering by source.

mod chain;
mod damaged_state;

use crate::common;
use cni_net::netlink::{AddressFlags, IpFamily, LinkSpec, Route, Rule, VethSpec, MAIN_TABLE};
use cni_net::Netlink;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use cni_testkit::traffic::udp_echo_server;
use serde_json::{json, Value};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const IFNAME: &str = "cnu0";

struct Setup {
    host: TestNetns,
    ctr: TestNetns,
    link_index: u32,
}

impl Setup {
    /// The pair with IPv4 (and IPv6 when `dual`) addresses, the container's default
    /// route(s) via the host end, as an interface plugin would leave them.
    fn new(dual: bool) -> Setup {
        let host = TestNetns::with_prefix("cnu").unwrap();
        let ctr = TestNetns::with_prefix("cnu").unwrap();
        let mut hnl = host.netlink().unwrap();
        hnl.add_veth(&VethSpec {
            link: LinkSpec::new("cnuh0"),
            peer: LinkSpec::new(IFNAME).netns(ctr.netns()),
        })
        .unwrap();
        let mut cnl = ctr.netlink().unwrap();
        let link = cnl.require_link(IFNAME).unwrap();
        let host_link = hnl.require_link("cnuh0").unwrap();
        let mut pairs = vec![("10.78.0.1/24", "10.78.0.2/24")];
        if dual {
            pairs.push(("fd78::1/64", "fd78::2/64"));
        }
        for (h, c) in &pairs {
            hnl.add_address(host_link.index, h.parse().unwrap(), AddressFlags::Nodad).unwrap();
            cnl.add_address(link.index, c.parse().unwrap(), AddressFlags::Nodad).unwrap();
        }
        hnl.set_link_up(host_link.index).unwrap();
        cnl.set_link_up(link.index).unwrap();
        cnl.add_route(
            &Route::default_route(IpFamily::V4).gateway("10.78.0.1".parse().unwrap()).oif(link.index),
        )
        .unwrap();
        if dual {
            cnl.add_route(
                &Route::default_route(IpFamily::V6).gateway("fd78::1".parse().unwrap()).oif(link.index),
            )
            .unwrap();
        }
        Setup { host, ctr, link_index: link.index }
    }

    fn nl(&self) -> Netlink {
        self.ctr.netlink().unwrap()
    }

    fn prev_result(&self, version: &str, dual: bool) -> Value {
        let mut ips = vec![json!({"address": "10.78.0.2/24", "gateway": "10.78.0.1", "interface": 1})];
        if dual {
            ips.push(json!({"address": "fd78::2/64", "gateway": "fd78::1", "interface": 1}));
        }
        // An address of another interface of the result is not sbr's business.
        ips.push(json!({"address": "10.79.0.2/24", "interface": 0}));
        let mut prev = json!({"cniVersion": version,
            "interfaces": [{"name": "cnuh0"}, {"name": IFNAME, "sandbox": self.ctr.path()}],
            "ips": ips, "routes": [{"dst": "0.0.0.0/0"}]});
        if version.starts_with("0.") {
            for ip in prev["ips"].as_array_mut().unwrap() {
                let v = if ip["address"].as_str().unwrap().contains(':') { "6" } else { "4" };
                ip["version"] = json!(v);
            }
        }
        prev
    }

    fn conf(&self, version: &str, dual: bool) -> Value {
        json!({"cniVersion": version, "name": "cnu-sbr", "type": "sbr",
            "prevResult": self.prev_result(version, dual)})
    }

    fn call(&self, verb: &str, conf: &Value) -> PluginCall {
        PluginCall::new(common::plugin("sbr"), verb)
            .netns(self.ctr.path())
            .ifname(IFNAME)
            .config(conf)
            .in_namespace(self.host.path())
    }

    /// `from` → table of the rules with a source, by netlink.
    fn source_rules(&self, family: IpFamily) -> Vec<(String, u32)> {
        let mut rules: Vec<_> = self
            .nl()
            .rules(family)
            .unwrap()
            .into_iter()
            .filter_map(|r| r.from.map(|f| (f.to_string(), r.table)))
            .collect();
        rules.sort();
        rules
    }

    fn routes(&self, family: IpFamily, table: u32) -> Vec<Route> {
        self.nl().routes(family, Some(table)).unwrap()
    }

    fn main_routes_on_link(&self, family: IpFamily) -> Vec<Route> {
        self.routes(family, MAIN_TABLE).into_iter().filter(|r| r.oif == Some(self.link_index)).collect()
    }
}

/// Sends a datagram from the container to `to`, from `source` (or letting the kernel pick
/// when `None`); Ok when it is echoed.
fn udp_from(s: &Setup, source: Option<&str>, to: SocketAddr) -> std::io::Result<()> {
    let bind: SocketAddr = match source {
        Some(ip) => SocketAddr::new(ip.parse().unwrap(), 0),
        None if to.is_ipv4() => "0.0.0.0:0".parse().unwrap(),
        None => "[::]:0".parse().unwrap(),
    };
    let socket = s.ctr.run(|| UdpSocket::bind(bind)).unwrap()?;
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    socket.send_to(b"cnu-sbr", to)?;
    let mut buf = [0u8; 16];
    let (n, _) = socket.recv_from(&mut buf)?;
    assert_eq!(&buf[..n], b"cnu-sbr");
    Ok(())
}

/// Puts the main-table routes ADD moved away back, as a fresh interface has them.
fn restore_main_routes(s: &Setup) {
    let mut nl = s.nl();
    nl.add_route(&Route::new("10.78.0.0/24".parse().unwrap()).oif(s.link_index)).unwrap();
    nl.add_route(&Route::default_route(IpFamily::V4).gateway("10.78.0.1".parse().unwrap()).oif(s.link_index))
        .unwrap();
}

#[test]
fn add_moves_the_routes_into_a_source_table_and_del_removes_it() {
    let s = Setup::new(false);
    let conf = s.conf("1.0.0", false);
    let out = s.call("ADD", &conf).run().json();
    assert_eq!(out["ips"], conf["prevResult"]["ips"], "prevResult passes through");

    assert_eq!(s.source_rules(IpFamily::V4), [("10.78.0.2/32".to_string(), 100)]);
    let table: Vec<(String, Option<String>)> = s
        .routes(IpFamily::V4, 100)
        .iter()
        .map(|r| (r.destination.to_string(), r.gateway.map(|g| g.to_string())))
        .collect();
    assert!(table.contains(&("0.0.0.0/0".into(), Some("10.78.0.1".into()))), "{table:?}");
    assert!(table.contains(&("10.78.0.0/24".into(), None)), "{table:?}");
    assert!(s.main_routes_on_link(IpFamily::V4).is_empty(), "the routes moved out of the main table");

    // The same, as `ip` sees it.
    let rules = s.ctr.ip_json(&["-4", "rule", "show"]);
    assert!(
        rules.as_array().unwrap().iter().any(|r| r["src"] == "10.78.0.2" && r["table"] == "100"),
        "{rules}"
    );
    let routes = s.ctr.ip_json(&["-4", "route", "show", "table", "100"]);
    let dsts: Vec<&str> = routes.as_array().unwrap().iter().map(|r| r["dst"].as_str().unwrap()).collect();
    assert!(dsts.contains(&"default") && dsts.contains(&"10.78.0.0/24"), "{routes}");

    // Traffic: from the container's address it is routed by table 100; with no source
    // the main table has no route to the gateway any more.
    let server = udp_echo_server(s.host.netns(), "10.78.0.1:0".parse().unwrap()).unwrap();
    udp_from(&s, Some("10.78.0.2"), server.local_addr()).expect("traffic from the source address flows");
    assert!(udp_from(&s, None, server.local_addr()).is_err(), "no route without the source address");

    assert!(s.call("CHECK", &conf).run().success());

    assert!(s.call("DEL", &conf).run().success());
    assert!(s.source_rules(IpFamily::V4).is_empty());
    assert!(s.routes(IpFamily::V4, 100).is_empty(), "table 100 emptied");
    assert!(s.ctr.ip_json(&["-4", "route", "show", "table", "100"]).as_array().unwrap().is_empty());
    assert!(s.call("DEL", &conf).run().success(), "DEL is idempotent");
}

#[test]
fn dual_stack_gets_one_table_per_address_and_skips_used_tables() {
    let s = Setup::new(true);
    // Someone else's rule to table 100 and route in table 101.
    let mut nl = s.nl();
    nl.add_rule(&Rule::from_source("10.99.0.9/32".parse().unwrap(), 100)).unwrap();
    nl.add_route(&Route::new("10.98.0.0/24".parse().unwrap()).oif(s.link_index).table(101)).unwrap();

    let conf = s.conf("0.4.0", true);
    assert!(s.call("ADD", &conf).run().success());
    assert_eq!(
        s.source_rules(IpFamily::V4),
        [("10.78.0.2/32".to_string(), 102), ("10.99.0.9/32".to_string(), 100)]
    );
    assert_eq!(s.source_rules(IpFamily::V6), [("fd78::2/128".to_string(), 103)]);
    let v6: Vec<String> = s.routes(IpFamily::V6, 103).iter().map(|r| r.destination.to_string()).collect();
    assert!(v6.contains(&"::/0".to_string()) && v6.contains(&"fd78::/64".to_string()), "{v6:?}");
    assert!(s.routes(IpFamily::V6, 102).is_empty(), "IPv6 routes go to the IPv6 address's table");
    let server = udp_echo_server(s.host.netns(), "[fd78::1]:0".parse().unwrap()).unwrap();
    udp_from(&s, Some("fd78::2"), server.local_addr()).expect("IPv6 traffic from the source address flows");
    assert!(s.call("CHECK", &conf).run().success());

    assert!(s.call("DEL", &conf).run().success());
    assert_eq!(s.source_rules(IpFamily::V4), [("10.99.0.9/32".to_string(), 100)], "others' rules stay");
    assert!(s.source_rules(IpFamily::V6).is_empty());
    assert!(s.routes(IpFamily::V4, 102).is_empty() && s.routes(IpFamily::V6, 103).is_empty());
    assert_eq!(s.routes(IpFamily::V4, 101).len(), 1, "others' tables stay");
}

#[test]
fn configured_table_only_adds_rules() {
    let s = Setup::new(false);
    let mut conf = s.conf("1.1.0", false);
    conf["table"] = json!(500);
    let main_before = s.main_routes_on_link(IpFamily::V4);
    assert!(s.call("ADD", &conf).run().success());
    assert_eq!(s.source_rules(IpFamily::V4), [("10.78.0.2/32".to_string(), 500)]);
    assert_eq!(s.main_routes_on_link(IpFamily::V4), main_before, "routes are left alone");
    assert!(s.call("CHECK", &conf).run().success());
    assert!(s.call("DEL", &conf).run().success());
    assert!(s.source_rules(IpFamily::V4).is_empty());

    conf["table"] = json!(-1);
    let e = s.call("ADD", &conf).run().error();
    assert!(e.code == 7 && e.msg.contains("table"), "{}", e.msg);
}

#[test]
fn check_after_tampering_and_del_without_prev_result() {
    let s = Setup::new(false);
    let conf = s.conf("1.0.0", false);
    assert!(s.call("ADD", &conf).run().success());
    let mut nl = s.nl();
    nl.delete_route(&Route::default_route(IpFamily::V4).gateway("10.78.0.1".parse().unwrap()).table(100))
        .unwrap();
    let e = s.call("CHECK", &conf).run().error();
    assert!(e.msg.contains("default route") && e.msg.contains("10.78.0.1"), "{}", e.msg);
    nl.delete_rule(&Rule::from_source("10.78.0.2/32".parse().unwrap(), 100)).unwrap();
    let e = s.call("CHECK", &conf).run().error();
    assert!(e.msg.contains("10.78.0.2"), "{}", e.msg);

    // DEL without a cached result finds the rules by the interface's addresses.
    assert!(s.call("DEL", &conf).run().success());
    restore_main_routes(&s);
    assert!(s.call("ADD", &conf).run().success());
    let rules = s.source_rules(IpFamily::V4);
    assert_eq!(rules.len(), 1, "{rules:?}");
    let mut bare = conf.clone();
    bare.as_object_mut().unwrap().remove("prevResult");
    assert!(s.call("DEL", &bare).run().success());
    assert!(s.source_rules(IpFamily::V4).is_empty());
    assert!(s.call("DEL", &bare).unset("CNI_NETNS").run().success());
    assert!(s.call("DEL", &conf).netns("/run/netns/cnu-no-such-ns").run().success());
}

#[test]
fn every_version_and_verb() {
    let s = Setup::new(false);
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let conf = s.conf(version, false);
        let out = s.call("ADD", &conf).run().json();
        assert_eq!(out["cniVersion"], version);
        assert_eq!(s.source_rules(IpFamily::V4).len(), 1, "{version}");
        assert!(s.call("DEL", &conf).run().success(), "{version}");
        assert!(s.source_rules(IpFamily::V4).is_empty(), "{version}");
        restore_main_routes(&s);
        let mut missing = conf.clone();
        missing.as_object_mut().unwrap().remove("prevResult");
        assert_eq!(s.call("ADD", &missing).run().error().code, 7, "{version}: chained only");
    }
    let mut empty = s.conf("1.0.0", false);
    empty["prevResult"]["ips"] = json!([]);
    assert_eq!(s.call("ADD", &empty).run().error().code, 7);
    for verb in ["GC", "STATUS"] {
        let mut conf = s.conf("1.1.0", false);
        conf.as_object_mut().unwrap().remove("prevResult");
        assert!(s.call(verb, &conf).run().success(), "{verb}");
    }
    let v = PluginCall::new(common::plugin("sbr"), "VERSION").stdin(r#"{"cniVersion":"1.1.0"}"#).run().json();
    assert_eq!(v["cniVersion"], "1.1.0");
}

#[test]
fn a_failure_midway_rolls_back_rules_and_tables() {
    let s = Setup::new(false);
    let mut conf = s.conf("1.0.0", false);
    // The second address's gateway is unreachable: its default route fails after the
    // first address's rule and table are made.
    conf["prevResult"]["ips"] = json!([
        {"address": "10.78.0.2/24", "gateway": "10.78.0.1", "interface": 1},
        {"address": "10.78.0.3/24", "gateway": "10.200.0.1", "interface": 1}]);
    let main_before = s.main_routes_on_link(IpFamily::V4);
    let e = s.call("ADD", &conf).run().error();
    assert!(e.msg.contains("10.200.0.1"), "{}", e.msg);
    assert!(s.source_rules(IpFamily::V4).is_empty(), "rules rolled back");
    assert!(s.routes(IpFamily::V4, 100).is_empty() && s.routes(IpFamily::V4, 101).is_empty());
    assert_eq!(s.main_routes_on_link(IpFamily::V4), main_before, "main table untouched");
}
