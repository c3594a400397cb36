//! ADD, CHECK and DEL of chains against the scriptable test plugin: what each plugin is
//! sent, in which order, and what is cached.

use crate::support::{calls, Rig};
use libcni::{NetworkConfig, RuntimeConf};
use serde_json::{json, Value};

fn three_plugin_list(rig: &Rig, version: &str) -> libcni::NetworkConfigList {
    rig.plugin("first").plugin("second").plugin("third");
    rig.list(json!({
        "cniVersion": version,
        "name": "chain",
        "plugins": [
            {"type": "first", "capabilities": {"portMappings": true, "ips": false},
             "testBehaviour": {"result": {"cniVersion": "1.0.0",
                 "interfaces": [{"name": "eth0", "sandbox": "/run/netns/ctr"}],
                 "ips": [{"interface": 0, "address": "10.22.0.5/24", "gateway": "10.22.0.1"}]}}},
            {"type": "second", "vendorKey": {"keep": [1, 2]}, "testBehaviour": {"echoPrevResult": true}},
            {"type": "third", "capabilities": {"bandwidth": true}, "testBehaviour": {"echoPrevResult": true}}
        ]
    }))
}

fn runtime() -> RuntimeConf {
    RuntimeConf::new("ctr-1", "/run/netns/ctr", "eth0")
        .with_arg("IgnoreUnknown", "1")
        .with_arg("K8S_POD_NAME", "web")
        .with_capability("portMappings", json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]))
        .with_capability("ips", json!(["10.22.0.5/24"]))
}

#[test]
fn add_chains_results_and_derives_each_request() {
    let rig = Rig::new();
    let list = three_plugin_list(&rig, "1.0.0");
    let result = rig.cni.add_network_list(&list, &runtime()).unwrap();
    let expected = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/ctr"}],
        "ips": [{"interface": 0, "address": "10.22.0.5/24", "gateway": "10.22.0.1"}]});
    assert_eq!(result.json, expected);
    assert_eq!(result.parse().unwrap().ips.len(), 1);

    let log = rig.log();
    assert_eq!(rig.calls(), calls(&[("ADD", "first"), ("ADD", "second"), ("ADD", "third")]));
    for inv in &log {
        assert_eq!(inv.var("CNI_COMMAND"), "ADD");
        assert_eq!(inv.var("CNI_CONTAINERID"), "ctr-1");
        assert_eq!(inv.var("CNI_NETNS"), "/run/netns/ctr");
        assert_eq!(inv.var("CNI_IFNAME"), "eth0");
        assert_eq!(inv.var("CNI_ARGS"), "IgnoreUnknown=1;K8S_POD_NAME=web");
        assert_eq!(inv.var("CNI_PATH"), rig.bin.display().to_string());
        assert_eq!(inv.stdin["name"], "chain");
        assert_eq!(inv.stdin["cniVersion"], "1.0.0");
        assert!(inv.stdin.get("capabilities").is_none(), "capabilities must be removed: {}", inv.stdin);
    }
    // runtimeConfig: capabilities the plugin enables ∩ what the runtime supplies.
    assert_eq!(
        log[0].stdin["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
    assert!(log[1].stdin.get("runtimeConfig").is_none());
    assert!(log[2].stdin.get("runtimeConfig").is_none(), "bandwidth was enabled but not supplied");
    // prevResult chains; unknown keys pass through untouched.
    assert!(log[0].stdin.get("prevResult").is_none());
    assert_eq!(log[1].stdin["prevResult"], expected);
    assert_eq!(log[2].stdin["prevResult"], expected);
    assert_eq!(log[1].stdin["vendorKey"], json!({"keep": [1, 2]}));

    // The cache holds the reference format.
    let cache: Value =
        serde_json::from_slice(&std::fs::read(rig.cache_file("chain", "ctr-1", "eth0")).unwrap()).unwrap();
    assert_eq!(cache["kind"], "cniCacheV1");
    assert_eq!(cache["containerId"], "ctr-1");
    assert_eq!(cache["ifName"], "eth0");
    assert_eq!(cache["networkName"], "chain");
    assert_eq!(cache["netns"], "/run/netns/ctr");
    assert_eq!(cache["cniArgs"], json!([["IgnoreUnknown", "1"], ["K8S_POD_NAME", "web"]]));
    assert_eq!(cache["capabilityArgs"]["ips"], json!(["10.22.0.5/24"]));
    assert_eq!(cache["config"], libcni::cache::encode_config(&list.bytes));
    assert_eq!(cache["result"], expected);
}

#[test]
fn check_uses_the_cached_result_in_order_and_del_runs_in_reverse() {
    let rig = Rig::new();
    let list = three_plugin_list(&rig, "0.4.0");
    let added = rig.cni.add_network_list(&list, &runtime()).unwrap();
    assert_eq!(added.json["cniVersion"], "0.4.0");
    assert_eq!(added.json["ips"][0]["version"], "4", "the 1.0.0 result was converted to the list's 0.4.0");
    rig.clear_log();

    rig.cni.check_network_list(&list, &runtime()).unwrap();
    rig.cni.del_network_list(&list, &runtime()).unwrap();
    assert_eq!(
        rig.calls(),
        calls(&[
            ("CHECK", "first"),
            ("CHECK", "second"),
            ("CHECK", "third"),
            ("DEL", "third"),
            ("DEL", "second"),
            ("DEL", "first")
        ])
    );
    for inv in rig.log() {
        assert_eq!(inv.stdin["prevResult"], added.json, "{} {}", inv.command, inv.stdin["type"]);
        assert!(inv.stdin.get("capabilities").is_none());
    }
    assert_eq!(rig.log()[0].stdin["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
    assert!(!rig.cache_file("chain", "ctr-1", "eth0").exists(), "DEL removes the cache entry");

    // A second DEL (no cache any more) still runs every plugin, without prevResult.
    rig.clear_log();
    rig.cni.del_network_list(&list, &runtime()).unwrap();
    assert_eq!(rig.calls().len(), 3);
    assert!(rig.log().iter().all(|i| i.stdin.get("prevResult").is_none()));
}

#[test]
fn check_is_refused_below_0_4_0_skipped_with_disable_check_and_needs_a_cache() {
    let rig = Rig::new();
    rig.plugin("p");
    let old = rig.list(json!({"cniVersion": "0.3.1", "name": "n", "plugins": [{"type": "p"}]}));
    let err = rig.cni.check_network_list(&old, &runtime()).unwrap_err();
    assert!(matches!(err, libcni::Error::VerbNotSupported { .. }), "{err}");
    let disabled = rig
        .list(json!({"cniVersion": "1.0.0", "name": "n", "disableCheck": true, "plugins": [{"type": "p"}]}));
    rig.cni.check_network_list(&disabled, &runtime()).unwrap();
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "p"}]}));
    let err = rig.cni.check_network_list(&list, &runtime()).unwrap_err();
    assert!(matches!(err, libcni::Error::NoCachedResult { .. }), "{err}");
    assert!(rig.log().is_empty(), "no plugin may run in any of these cases");
}

#[test]
fn del_below_0_4_0_sends_no_prev_result() {
    let rig = Rig::new();
    rig.plugin("p");
    let list = rig.list(json!({"cniVersion": "0.3.1", "name": "n", "plugins": [{"type": "p"}]}));
    rig.cni.add_network_list(&list, &runtime()).unwrap();
    rig.cni.del_network_list(&list, &runtime()).unwrap();
    let log = rig.log();
    assert_eq!(log[1].command, "DEL");
    assert!(log[1].stdin.get("prevResult").is_none());
    assert!(!rig.cache_file("n", "ctr-1", "eth0").exists());
}

#[test]
fn a_failing_add_stops_the_chain_and_caches_nothing() {
    let rig = Rig::new();
    rig.plugin("ok").plugin("bad").plugin("never");
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "ok"},
        {"type": "bad", "testBehaviour": {"error": {"code": 11, "msg": "busy", "details": "retry soon"}}},
        {"type": "never"}]}));
    let err = rig.cni.add_network_list(&list, &runtime()).unwrap_err();
    match &err {
        libcni::Error::Plugin { plugin_type, command, error } => {
            assert_eq!((plugin_type.as_str(), command.as_str()), ("bad", "ADD"));
            assert_eq!((error.code, error.msg.as_str(), error.details.as_str()), (11, "busy", "retry soon"));
        }
        other => panic!("expected the plugin's error, got {other}"),
    }
    assert_eq!(err.to_cni_error().code, 11);
    // The chain stopped at "bad", then undid what ran, in reverse (a refused ADD leaves
    // nothing behind); "never" was never run.
    assert_eq!(rig.calls(), calls(&[("ADD", "ok"), ("ADD", "bad"), ("DEL", "bad"), ("DEL", "ok")]));
    assert!(!rig.cache_file("n", "ctr-1", "eth0").exists());
}

#[test]
fn a_failing_del_keeps_the_cache_entry() {
    let rig = Rig::new();
    rig.plugin("a").plugin("b");
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "a", "testBehaviour": {"perCommand": {"DEL": {"error": {"code": 5, "msg": "disk on fire"}}}}},
        {"type": "b"}]}));
    rig.cni.add_network_list(&list, &runtime()).unwrap();
    let err = rig.cni.del_network_list(&list, &runtime()).unwrap_err();
    assert_eq!(err.plugin_error().unwrap().msg, "disk on fire");
    assert!(rig.cache_file("n", "ctr-1", "eth0").exists(), "the cache stays until every plugin succeeded");
}

#[test]
fn single_plugin_configurations_work_like_lists_of_one() {
    let rig = Rig::new();
    rig.plugin("solo");
    let bytes = br#"{"cniVersion":"1.1.0","name":"one","type":"solo","capabilities":{"mac":true}}"#;
    let conf = NetworkConfig::from_bytes(bytes).unwrap();
    let rt = runtime().with_capability("mac", json!("c2:11:22:33:44:55"));
    rig.cni.add_network(&conf, &rt).unwrap();
    rig.cni.check_network(&conf, &rt).unwrap();
    rig.cni.status_network(&conf).unwrap();
    let cache: Value =
        serde_json::from_slice(&std::fs::read(rig.cache_file("one", "ctr-1", "eth0")).unwrap()).unwrap();
    assert_eq!(
        cache["config"],
        libcni::cache::encode_config(bytes),
        "the cache records the conf's own bytes"
    );
    rig.cni.del_network(&conf, &rt).unwrap();
    rig.cni.gc_network(&conf, &[]).unwrap();
    assert_eq!(
        rig.calls(),
        calls(&[("ADD", "solo"), ("CHECK", "solo"), ("STATUS", "solo"), ("DEL", "solo"), ("GC", "solo")])
    );
    assert_eq!(rig.log()[0].stdin["runtimeConfig"], json!({"mac": "c2:11:22:33:44:55"}));
}

#[test]
fn invalid_runtime_values_are_refused_before_any_plugin_runs() {
    let rig = Rig::new();
    rig.plugin("p");
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "p"}]}));
    for rt in [
        RuntimeConf::new("../../etc", "/n", "eth0"),
        RuntimeConf::new("ok", "/n", "eth0/x"),
        RuntimeConf::new("", "/n", "eth0"),
    ] {
        assert!(matches!(rig.cni.add_network_list(&list, &rt), Err(libcni::Error::InvalidRuntimeConf(_))));
        assert!(matches!(rig.cni.del_network_list(&list, &rt), Err(libcni::Error::InvalidRuntimeConf(_))));
    }
    assert!(rig.log().is_empty());
}

#[test]
fn cached_attachments_are_listed_and_filtered_by_container() {
    let rig = Rig::new();
    rig.plugin("p");
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "p"}]}));
    for (ctr, ifname) in [("c1", "eth0"), ("c1", "eth1"), ("c2", "eth0")] {
        rig.cni
            .add_network_list(
                &list,
                &RuntimeConf::new(ctr, format!("/run/netns/{ctr}"), ifname).with_arg("A", "1"),
            )
            .unwrap();
    }
    // A corrupt entry is skipped, not an error.
    std::fs::write(rig.cache_file("n", "c3", "eth0"), b"{\"kind\":").unwrap();
    let all = rig.cni.cached_attachments(None).unwrap();
    let ids: Vec<_> = all.iter().map(|a| (a.container_id.as_str(), a.ifname.as_str())).collect();
    assert_eq!(ids, [("c1", "eth0"), ("c1", "eth1"), ("c2", "eth0")]);
    assert_eq!(all[2].netns, "/run/netns/c2");
    assert_eq!(all[2].cni_args, vec![("A".to_string(), "1".to_string())]);
    assert_eq!(all[2].config, list.bytes);
    assert_eq!(rig.cni.cached_attachments(Some("c1")).unwrap().len(), 2);
    let cached = rig.cni.cached_result(&list, &RuntimeConf::new("c2", "", "eth0")).unwrap().unwrap();
    assert_eq!(cached.json["interfaces"][0]["sandbox"], "/run/netns/c2");
}
