//! `tuning` through the installed multi-call binary, on a veth pair between a throwaway
//! "host" namespace and a "container" namespace (names prefixed `cnu`). Values are read
//! back with sysctl reads inside the container and netlink.

use crate::common;
mod hostile_record;
use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_net::{sysctl, Link, MacAddr};
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const IFNAME: &str = "cnu0";
const ARP_FILTER: &str = "net.ipv4.conf.cnu0.arp_filter";
const SOMAXCONN: &str = "net.core.somaxconn";
const NEW_MAC: &str = "c2:11:22:33:44:55";

/// A "host" and a "container" namespace (names prefixed `prefix`) joined by a veth pair:
/// `{prefix}h0` in the host, `ifname` in the container.
fn veth_namespaces(prefix: &str, ifname: &str) -> (TestNetns, TestNetns) {
    let host = TestNetns::with_prefix(prefix).unwrap();
    let ctr = TestNetns::with_prefix(prefix).unwrap();
    host.netlink()
        .unwrap()
        .add_veth(&VethSpec {
            link: LinkSpec::new(format!("{prefix}h0")),
            peer: LinkSpec::new(ifname).netns(ctr.netns()),
        })
        .unwrap();
    (host, ctr)
}

/// A host and a container namespace joined by a veth pair whose container end is `cnu0`
/// with `10.77.0.2/24`, plus a data dir for tuning's records.
struct Setup {
    host: TestNetns,
    ctr: TestNetns,
    data_dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let (host, ctr) = veth_namespaces("cnu", IFNAME);
        let mut cnl = ctr.netlink().unwrap();
        let link = cnl.require_link(IFNAME).unwrap();
        cnl.add_address(link.index, "10.77.0.2/24".parse().unwrap(), AddressFlags::empty()).unwrap();
        cnl.set_link_up(link.index).unwrap();
        Setup { host, ctr, data_dir: tempfile::tempdir().unwrap() }
    }

    fn link(&self) -> Link {
        self.ctr.netlink().unwrap().require_link(IFNAME).unwrap()
    }

    fn sysctl(&self, key: &str) -> String {
        sysctl::read_in(self.ctr.netns(), key).unwrap()
    }

    fn prev_result(&self, version: &str) -> Value {
        let mac = self.link().mac.unwrap().to_string();
        let mut prev = json!({"cniVersion": version,
            "interfaces": [{"name": "cnuh0"}, {"name": IFNAME, "mac": mac, "sandbox": self.ctr.path()}],
            "ips": [{"address": "10.77.0.2/24", "gateway": "10.77.0.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0"}]});
        if version.starts_with("0.3") || version == "0.4.0" {
            prev["ips"][0]["version"] = json!("4");
        }
        prev
    }

    fn conf(&self, version: &str, extra: Value) -> Value {
        let mut conf = json!({"cniVersion": version, "name": "cnu-tuning", "type": "tuning",
            "dataDir": self.data_dir.path(), "prevResult": self.prev_result(version)});
        for (k, v) in extra.as_object().unwrap() {
            conf[k] = v.clone();
        }
        conf
    }

    fn call(&self, verb: &str, conf: &Value) -> PluginCall {
        PluginCall::new(common::plugin("tuning"), verb)
            .netns(self.ctr.path())
            .ifname(IFNAME)
            .config(conf)
            .in_namespace(self.host.path())
    }

    fn record(&self) -> PathBuf {
        self.data_dir.path().join(format!("test-ctr_{IFNAME}.json"))
    }
}

fn everything() -> Value {
    json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1", SOMAXCONN: "500"},
        "mac": NEW_MAC, "mtu": 1400, "promisc": true, "allmulti": true, "txQLen": 333})
}

/// What tuning touches, as the kernel reports it.
fn snapshot(s: &Setup) -> (String, String, Option<MacAddr>, u32, bool, bool, Option<u32>) {
    let l = s.link();
    (s.sysctl(ARP_FILTER), s.sysctl(SOMAXCONN), l.mac, l.mtu, l.promisc, l.allmulti, l.txqlen)
}

#[test]
fn add_applies_everything_and_del_restores_it() {
    let s = Setup::new();
    let before = snapshot(&s);
    assert_eq!(before.0, "0");
    let conf = s.conf("1.0.0", everything());

    let out = s.call("ADD", &conf).run().json();
    assert_eq!(out["interfaces"][1]["mac"], NEW_MAC, "the result reports the new MAC: {out}");
    assert_eq!(out["ips"], conf["prevResult"]["ips"], "prevResult passes through");
    assert_eq!(s.sysctl(ARP_FILTER), "1");
    assert_eq!(s.sysctl(SOMAXCONN), "500");
    let l = s.link();
    assert_eq!(l.mac.unwrap().to_string(), NEW_MAC);
    assert_eq!((l.mtu, l.promisc, l.allmulti, l.txqlen), (1400, true, true, Some(333)));
    let record: Value = serde_json::from_slice(&std::fs::read(s.record()).unwrap()).unwrap();
    assert_eq!(record["mtu"], 1500, "the reference's layout: {record}");
    assert_eq!(record["sysctl"][ARP_FILTER], "0");

    assert!(s.call("CHECK", &conf).run().success());

    let del = s.call("DEL", &conf).run();
    assert!(del.success(), "{del:?}");
    assert_eq!(snapshot(&s), before, "DEL restores every value");
    assert!(!s.record().exists());
    assert!(s.call("DEL", &conf).run().success(), "DEL is idempotent");
    assert_eq!(snapshot(&s), before);
}

#[test]
fn repeated_add_keeps_the_first_originals() {
    let s = Setup::new();
    let before = snapshot(&s);
    let conf = s.conf("1.1.0", json!({"mtu": 1400, "sysctl": {SOMAXCONN: "600"}}));
    assert!(s.call("ADD", &conf).run().success());
    assert!(s.call("ADD", &conf).run().success());
    assert!(s.call("DEL", &conf).run().success());
    assert_eq!(snapshot(&s), before);
}

#[test]
fn check_after_tampering_names_what_differs() {
    let s = Setup::new();
    let conf = s.conf("0.4.0", everything());
    assert!(s.call("ADD", &conf).run().success());
    let mut nl = s.ctr.netlink().unwrap();
    nl.set_link_mtu(s.link().index, 1300).unwrap();
    let e = s.call("CHECK", &conf).run().error();
    assert!(e.msg.contains("MTU") && e.msg.contains("1300") && e.msg.contains("1400"), "{}", e.msg);
    nl.set_link_mtu(s.link().index, 1400).unwrap();
    assert!(s.call("CHECK", &conf).run().success());
    sysctl::write_in(s.ctr.netns(), ARP_FILTER, "0").unwrap();
    let e = s.call("CHECK", &conf).run().error();
    assert!(e.msg.contains(ARP_FILTER), "{}", e.msg);
    sysctl::write_in(s.ctr.netns(), ARP_FILTER, "1").unwrap();
    nl.set_link_promisc(s.link().index, false).unwrap();
    let e = s.call("CHECK", &conf).run().error();
    assert!(e.msg.contains("promiscuous"), "{}", e.msg);
}

/// Each bad input: code 7, the message names the culprit, and nothing changed.
#[test]
fn bad_input_is_refused_before_anything_changes() {
    let s = Setup::new();
    let before = snapshot(&s);
    let good = json!({"net.ipv4.conf.IFNAME.arp_filter": "1"});
    let cases = [
        (
            json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1", "kernel.hostname": "x"}}),
            "kernel.hostname",
        ),
        (
            json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1", "net/../kernel/x": "1"}}),
            "net/../kernel/x",
        ),
        (
            json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1", "net.ipv4.no_such_key": "1"}}),
            "net.ipv4.no_such_key",
        ),
        (json!({"sysctl": good, "mac": "c2:11:22:33:44"}), "mac"),
        (json!({"sysctl": good, "mtu": 60}), "mtu"),
        (json!({"sysctl": good, "txQLen": -1}), "txQLen"),
        (json!({"sysctl": good, "promisc": "yes"}), "promisc"),
        (json!({"sysctl": good, "args": {"cni": {"mtu": 10}}}), "args.cni.mtu"),
    ];
    for (extra, culprit) in cases {
        let e = s.call("ADD", &s.conf("1.0.0", extra.clone())).run().error();
        assert_eq!(e.code, 7, "{extra}: {}", e.msg);
        assert!(e.msg.contains(culprit), "{extra}: {} should name {culprit}", e.msg);
        assert_eq!(snapshot(&s), before, "{extra} changed something");
        assert!(!s.record().exists());
    }
    let e = s.call("ADD", &s.conf("1.0.0", json!({})).clone()).args("IgnoreUnknown=1;MAC=nope").run().error();
    assert_eq!(e.code, 7);
    let raw = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","type":"tuning","dataDir":{:?},"sysctl":{{"net.core.somaxconn":"1","net.core.somaxconn":"2"}},"prevResult":{}}}"#,
        s.data_dir.path(),
        s.prev_result("1.0.0")
    );
    let e = s.call("ADD", &json!(null)).stdin(raw).run().error();
    assert!(e.code == 7 && e.msg.contains("duplicated"), "{}", e.msg);
    assert_eq!(snapshot(&s), before);
}

#[test]
fn a_kernel_failure_midway_rolls_back() {
    let s = Setup::new();
    let before = snapshot(&s);
    // Sysctls and the MAC are applied before the MTU, which veth refuses above 65535.
    let conf = s.conf("1.0.0", json!({"sysctl": {SOMAXCONN: "777"}, "mac": NEW_MAC, "mtu": 70000}));
    let e = s.call("ADD", &conf).run().error();
    assert!(e.msg.contains("MTU"), "{}", e.msg);
    assert_eq!(snapshot(&s), before, "the sysctl and MAC were rolled back");
    assert!(!s.record().exists());
}

#[test]
fn allowlist_refuses_unlisted_sysctls() {
    let s = Setup::new();
    let list = s.data_dir.path().join("allowlist.conf");
    std::fs::write(&list, "^net\\.core\\.somaxconn$\n\n  ^net\\.ipv4\\.conf\\.IFNAME\\.rp_filter$ \n")
        .unwrap();
    let before = snapshot(&s);
    let refused =
        s.conf("1.0.0", json!({"sysctl": {SOMAXCONN: "900", "net.ipv4.conf.IFNAME.arp_filter": "1"}}));
    let e = s.call("ADD", &refused).env("CNI_TUNING_ALLOWLIST", list.display().to_string()).run().error();
    assert_eq!(e.code, 7);
    assert!(e.msg.contains("net.ipv4.conf.IFNAME.arp_filter"), "{}", e.msg);
    assert_eq!(snapshot(&s), before);
    let allowed = s.conf("1.0.0", json!({"sysctl": {SOMAXCONN: "900"}}));
    assert!(s.call("ADD", &allowed).env("CNI_TUNING_ALLOWLIST", list.display().to_string()).run().success());
    assert_eq!(s.sysctl(SOMAXCONN), "900");
    assert!(s.call("DEL", &allowed).run().success());

    // An allowlist that appears after ADD does not block DEL from restoring.
    assert!(s.call("ADD", &refused).run().success());
    assert_eq!(s.sysctl(ARP_FILTER), "1");
    let del = s.call("DEL", &refused).env("CNI_TUNING_ALLOWLIST", list.display().to_string()).run();
    assert!(del.success(), "{del:?}");
    assert_eq!(snapshot(&s), before);
}

#[test]
fn mac_from_runtime_config_beats_args_and_cni_args() {
    let s = Setup::new();
    let conf = s.conf(
        "1.0.0",
        json!({"mac": "c2:00:00:00:00:01", "args": {"cni": {"mac": "c2:00:00:00:00:02"}},
            "runtimeConfig": {"mac": "c2:00:00:00:00:03"}}),
    );
    let out = s.call("ADD", &conf).args("IgnoreUnknown=1;MAC=c2:00:00:00:00:04").run().json();
    assert_eq!(out["interfaces"][1]["mac"], "c2:00:00:00:00:03");
    assert_eq!(s.link().mac.unwrap().to_string(), "c2:00:00:00:00:03");
    let conf = s.conf("1.0.0", json!({"mac": "c2:00:00:00:00:01"}));
    let out = s.call("ADD", &conf).args("IgnoreUnknown=1;MAC=c2:00:00:00:00:04").run().json();
    assert_eq!(out["interfaces"][1]["mac"], "c2:00:00:00:00:04", "CNI_ARGS beats the plugin's own key");
    let conf = s.conf("1.0.0", json!({"args": {"cni": {"promisc": true, "sysctl": {SOMAXCONN: "321"}}}}));
    assert!(s.call("ADD", &conf).run().success());
    assert!(s.link().promisc);
    assert_eq!(s.sysctl(SOMAXCONN), "321");
}

#[test]
fn every_version_and_verb() {
    let s = Setup::new();
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let conf = s.conf(version, json!({"mtu": 1450}));
        let out = s.call("ADD", &conf).run().json();
        assert_eq!(out["cniVersion"], version);
        assert_eq!(out["ips"][0]["address"], "10.77.0.2/24", "{version}: {out}");
        assert_eq!(s.link().mtu, 1450);
        let check = s.call("CHECK", &conf).run();
        if version == "0.4.0" || version.starts_with('1') {
            assert!(check.success(), "{version}: {check:?}");
        } else {
            assert_eq!(check.error().code, 1, "CHECK is refused before 0.4.0");
        }
        assert!(s.call("DEL", &conf).run().success());
        assert_eq!(s.link().mtu, 1500, "{version}");
        let mut missing = conf.clone();
        missing.as_object_mut().unwrap().remove("prevResult");
        assert_eq!(s.call("ADD", &missing).run().error().code, 7, "{version}: prevResult is required");
    }
    // Before 0.3.0 there is no prevResult: the result describes the interface.
    for version in ["0.1.0", "0.2.0"] {
        let mut conf = s.conf(version, json!({"mac": NEW_MAC}));
        conf.as_object_mut().unwrap().remove("prevResult");
        let out = s.call("ADD", &conf).run().json();
        assert_eq!(out["ip4"]["ip"], "10.77.0.2/24", "{version}: {out}");
        assert!(s.call("DEL", &conf).run().success());
        assert_ne!(s.link().mac.unwrap().to_string(), NEW_MAC);
    }
    for verb in ["GC", "STATUS"] {
        assert!(s.call(verb, &s.conf("1.1.0", json!({}))).run().success(), "{verb}");
        assert_eq!(s.call(verb, &s.conf("1.0.0", json!({}))).run().error().code, 1, "{verb} needs 1.1.0");
    }
    let v =
        PluginCall::new(common::plugin("tuning"), "VERSION").stdin(r#"{"cniVersion":"1.1.0"}"#).run().json();
    assert_eq!(v["supportedVersions"].as_array().unwrap().len(), 7);
}

#[test]
fn del_without_netns_or_interface_drops_the_record() {
    let s = Setup::new();
    let conf = s.conf("1.0.0", json!({"mtu": 1400}));
    assert!(s.call("ADD", &conf).run().success());
    assert!(s.record().exists());
    assert!(s.call("DEL", &conf).unset("CNI_NETNS").run().success());
    assert!(!s.record().exists());
    assert!(s.call("ADD", &conf).run().success());
    s.ctr.netlink().unwrap().delete_link_by_name(IFNAME).unwrap();
    assert!(s.call("DEL", &conf).run().success(), "interface gone: nothing to restore");
    assert!(!s.record().exists());
    assert!(s.call("DEL", &conf).netns("/run/netns/cnu-no-such-ns").run().success());
}

#[test]
fn gc_drops_records_of_gone_attachments_of_this_network_only() {
    let s = Setup::new();
    let conf = s.conf("1.1.0", json!({"mtu": 1400}));
    for id in ["cnu-a", "cnu-b"] {
        assert!(s.call("ADD", &conf).container_id(id).run().success());
    }
    let foreign = s.data_dir.path().join("other_eth0.json");
    std::fs::write(&foreign, r#"{"mtu":1500}"#).unwrap();
    let mut gc =
        s.conf("1.1.0", json!({"cni.dev/valid-attachments": [{"containerID": "cnu-a", "ifname": IFNAME}]}));
    gc.as_object_mut().unwrap().remove("prevResult");
    let mut other_net = gc.clone();
    other_net["name"] = json!("cnu-other");
    other_net["cni.dev/valid-attachments"] = json!([]);
    assert!(s.call("GC", &other_net).run().success());
    let exists = |id: &str| Path::new(&s.data_dir.path().join(format!("{id}_{IFNAME}.json"))).exists();
    assert!(exists("cnu-a") && exists("cnu-b"), "another network's GC leaves our records");
    assert!(s.call("GC", &gc).run().success());
    assert!(exists("cnu-a"));
    assert!(!exists("cnu-b"));
    assert!(foreign.exists(), "records without an owner (the Go plugin's) are left alone");
}

#[test]
fn nothing_to_tune_passes_the_result_through_and_still_needs_the_netns() {
    let s = Setup::new();
    let before = snapshot(&s);
    let conf = s.conf("1.0.0", json!({}));
    let result = s.call("ADD", &conf).run().json();
    assert_eq!(result["ips"], s.prev_result("1.0.0")["ips"]);
    assert_eq!(result["interfaces"], s.prev_result("1.0.0")["interfaces"]);
    assert_eq!(snapshot(&s), before);
    assert!(!s.record().exists(), "no record for nothing changed");
    let missing = s.call("ADD", &conf).netns("/run/netns/cnu-no-such-ns").run().error();
    assert!(missing.msg.contains("cnu-no-such-ns"), "{missing:?}");
    assert!(s.call("DEL", &conf).run().success());
}
