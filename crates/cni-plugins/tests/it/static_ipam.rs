//! `static` IPAM through the installed multi-call binary.

use crate::common;

use cni_testkit::runner::PluginCall;
use serde_json::{json, Value};

fn call(command: &str, conf: &Value) -> PluginCall {
    PluginCall::new(common::plugin("static"), command).netns("/run/netns/x").config(conf)
}

fn conf(version: &str) -> Value {
    json!({"cniVersion": version, "name": "st", "type": "static", "ipam": {"type": "static",
        "addresses": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}, {"address": "fd10::5/64"}],
        "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.10.0.1"]}}})
}

#[test]
fn add_returns_the_configured_addresses_in_each_version_family() {
    let v1 = call("ADD", &conf("1.0.0")).run().json();
    assert_eq!(
        v1,
        json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.10.0.5/24", "gateway": "10.10.0.1"}, {"address": "fd10::5/64"}],
            "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.10.0.1"]}})
    );
    let v04 = call("ADD", &conf("0.4.0")).run().json();
    assert_eq!(v04["ips"][1]["version"], "6");
    let v02 = call("ADD", &conf("0.2.0")).run().json();
    assert_eq!(v02["ip4"]["ip"], "10.10.0.5/24");
    assert_eq!(v02["ip6"]["ip"], "fd10::5/64");
}

#[test]
fn addresses_from_cni_args_args_and_runtime_config() {
    let mut c = conf("1.0.0");
    c["ipam"]["addresses"] = json!([]);
    c["args"] = json!({"cni": {"ips": ["10.10.0.7/24"]}});
    c["runtimeConfig"] = json!({"ips": ["10.10.0.8/24", "10.10.0.8/24"]});
    let out = call("ADD", &c).args("IgnoreUnknown=1;IP=10.10.0.6/24;GATEWAY=10.10.0.1").run().json();
    let ips: Vec<&str> =
        out["ips"].as_array().unwrap().iter().map(|i| i["address"].as_str().unwrap()).collect();
    assert_eq!(ips, ["10.10.0.6/24", "10.10.0.7/24", "10.10.0.8/24"]);
    assert_eq!(out["ips"][0]["gateway"], "10.10.0.1");
}

#[test]
fn no_address_or_bad_address_is_a_config_error_naming_the_field() {
    let mut c = conf("1.0.0");
    c["ipam"]["addresses"] = json!([]);
    let e = call("ADD", &c).run().error();
    assert_eq!(e.code, 7);
    assert!(e.msg.contains("addresses"), "{}", e.msg);
    let e = call("ADD", &c).args("IP=10.0.0.1").run().error();
    assert!(e.msg.contains("CNI_ARGS IP"), "{}", e.msg);
    let mut c = conf("1.0.0");
    c["ipam"]["addresses"][0]["address"] = json!("10.0.0.300/24");
    let e = call("ADD", &c).run().error();
    assert!(e.msg.contains("ipam.addresses[0].address"), "{}", e.msg);
}

#[test]
fn check_compares_with_prev_result_and_del_gc_status_succeed() {
    let mut c = conf("1.0.0");
    c["prevResult"] = call("ADD", &conf("1.0.0")).run().json();
    assert!(call("CHECK", &c).run().success());
    c["prevResult"]["ips"][0]["gateway"] = json!("10.10.0.254");
    assert!(call("CHECK", &c).run().error().msg.contains("gateway"));
    assert!(call("DEL", &conf("1.0.0")).unset("CNI_NETNS").run().success());
    for verb in ["GC", "STATUS"] {
        assert!(call(verb, &conf("1.1.0")).run().success(), "{verb}");
    }
}

#[test]
fn multi_call_binary_lists_and_refuses_unknown_names() {
    let bin = env!("CARGO_BIN_EXE_cni-plugins");
    let out = std::process::Command::new(bin).arg("--list").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "static"));
    let out = std::process::Command::new(bin).arg("no-such-plugin").output().unwrap();
    assert!(!out.status.success());
    // `cni-plugins static` runs the plugin like the link does.
    let out = PluginCall::new(bin, "VERSION").run();
    assert_ne!(out.status, 0, "the bare binary name is not a plugin");
}
