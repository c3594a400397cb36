//! Damaged state for sbr. sbr keeps no file: its record of an attachment is the
//! kernel state it made in the container — a rule `from <address> lookup <table>` and the
//! table's routes. Each is damaged the ways a crash or an administrator can (the rule
//! deleted, the table emptied, the addresses gone from the interface, the interface gone,
//! the namespace gone), then DEL runs with and without prevResult (a runtime that lost its
//! cache): DEL succeeds, GC succeeds, and no rule or table of sbr's is left.

use crate::common;

use cni_net::netlink::{AddressFlags, IpFamily, LinkSpec, Route, VethSpec};
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use serde_json::{json, Value};

const IFNAME: &str = "bis0";

#[derive(Debug, Clone, Copy)]
enum Damage {
    RuleDeleted,
    TableEmptied,
    AddressesGone,
    InterfaceGone,
    NamespaceGone,
}

/// A veth pair between a "host" and a "container" (10.96.0.2/24 via 10.96.0.1).
fn setup() -> (TestNetns, TestNetns) {
    let host = TestNetns::with_prefix("bis").unwrap();
    let ctr = TestNetns::with_prefix("bis").unwrap();
    let mut hnl = host.netlink().unwrap();
    hnl.add_veth(&VethSpec { link: LinkSpec::new("bish0"), peer: LinkSpec::new(IFNAME).netns(ctr.netns()) })
        .unwrap();
    let mut cnl = ctr.netlink().unwrap();
    let link = cnl.require_link(IFNAME).unwrap();
    let host_link = hnl.require_link("bish0").unwrap();
    hnl.add_address(host_link.index, "10.96.0.1/24".parse().unwrap(), AddressFlags::Nodad).unwrap();
    cnl.add_address(link.index, "10.96.0.2/24".parse().unwrap(), AddressFlags::Nodad).unwrap();
    hnl.set_link_up(host_link.index).unwrap();
    cnl.set_link_up(link.index).unwrap();
    cnl.add_route(&Route::default_route(IpFamily::V4).gateway("10.96.0.1".parse().unwrap()).oif(link.index))
        .unwrap();
    (host, ctr)
}

fn conf(ctr: &TestNetns, with_prev: bool) -> Value {
    let mut conf = json!({"cniVersion": "1.1.0", "name": "bis-sbr", "type": "sbr"});
    if with_prev {
        conf["prevResult"] = json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "bish0"}, {"name": IFNAME, "sandbox": ctr.path()}],
            "ips": [{"address": "10.96.0.2/24", "gateway": "10.96.0.1", "interface": 1}]});
    }
    conf
}

fn call(host: &TestNetns, ctr: &TestNetns, verb: &str, conf: &Value) -> PluginCall {
    PluginCall::new(common::plugin("sbr"), verb)
        .netns(ctr.path())
        .ifname(IFNAME)
        .config(conf)
        .in_namespace(host.path())
}

/// sbr's rules (those with a source) and the routes of tables other than main and local,
/// as `ip -j` shows them in the container.
fn sbr_state(ctr: &TestNetns) -> Vec<String> {
    let mut state = Vec::new();
    for rule in ctr.ip_json(&["rule", "show"]).as_array().unwrap() {
        if rule.get("src").is_some_and(|src| src != "all") {
            state.push(format!("rule {rule}"));
        }
    }
    for route in ctr.ip_json(&["route", "show", "table", "all"]).as_array().unwrap() {
        if !matches!(route["table"].as_str(), Some("main" | "local")) && route.get("table").is_some() {
            state.push(format!("route {route}"));
        }
    }
    state
}

fn damage(ctr: &TestNetns, kind: Damage) {
    let run = |args: &[&str]| {
        let out = ctr.command("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    match kind {
        Damage::RuleDeleted => run(&["rule", "del", "from", "10.96.0.2"]),
        Damage::TableEmptied => run(&["route", "flush", "table", "100"]),
        Damage::AddressesGone => run(&["address", "flush", "dev", IFNAME]),
        Damage::InterfaceGone => run(&["link", "del", IFNAME]),
        Damage::NamespaceGone => {}
    }
}

#[test]
fn sbr_del_and_gc_succeed_on_damaged_kernel_state_and_leave_nothing() {
    cni_testkit::ns::require_root();
    let mut cases = 0;
    let kinds = [
        Damage::RuleDeleted,
        Damage::TableEmptied,
        Damage::AddressesGone,
        Damage::InterfaceGone,
        Damage::NamespaceGone,
    ];
    for kind in kinds {
        for with_prev in [true, false] {
            let (host, ctr) = setup();
            let added = call(&host, &ctr, "ADD", &conf(&ctr, true)).run().json();
            assert!(added["ips"].is_array(), "{kind:?}: {added}");
            assert!(!sbr_state(&ctr).is_empty(), "{kind:?}: ADD made no rule or table");
            damage(&ctr, kind);
            if let Damage::NamespaceGone = kind {
                // The runtime's DEL after the container, and its namespace, went away.
                let path = ctr.path().to_path_buf();
                let conf = conf(&ctr, with_prev);
                drop(ctr);
                common::ok(call(&host, &host, "DEL", &conf).netns(&path).run());
                cases += 1;
                continue;
            }
            common::ok(call(&host, &ctr, "DEL", &conf(&ctr, with_prev)).run());
            let left = sbr_state(&ctr);
            // Without prevResult, DEL finds sbr's rule by the interface's addresses: with the
            // addresses or the interface gone, nothing tells its rule from an administrator's.
            let expected_left = matches!(kind, Damage::AddressesGone | Damage::InterfaceGone) && !with_prev;
            assert_eq!(!left.is_empty(), expected_left, "{kind:?} prevResult={with_prev}: {left:?}");
            let mut gc = conf(&ctr, false);
            gc["cni.dev/valid-attachments"] = json!([]);
            common::ok(call(&host, &ctr, "GC", &gc).run());
            // The runtime's DEL with prevResult (its cache) clears even those.
            common::ok(call(&host, &ctr, "DEL", &conf(&ctr, true)).run());
            assert!(sbr_state(&ctr).is_empty(), "{kind:?}: {:?}", sbr_state(&ctr));
            cases += 1;
        }
    }
    assert_eq!(cases, 10);
}
