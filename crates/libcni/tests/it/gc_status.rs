//! GC, STATUS, damaged cache files, and the cache file written by Go libcni.

use crate::support::{self, calls, Rig};
use libcni::{Attachment, Error, NetworkConfigList, RuntimeConf};
use serde_json::{json, Value};

fn two_plugin_list(rig: &Rig, version: &str, extra: Value) -> NetworkConfigList {
    rig.plugin("a").plugin("b");
    let mut list = json!({"cniVersion": version, "name": "gcnet", "plugins": [
        {"type": "a", "capabilities": {"portMappings": true}}, {"type": "b"}]});
    list.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    rig.list(list)
}

fn attach(rig: &Rig, list: &NetworkConfigList, ctr: &str) {
    let rt = RuntimeConf::new(ctr, format!("/run/netns/{ctr}"), "eth0")
        .with_arg("K8S_POD_NAME", ctr)
        .with_capability("portMappings", json!([{"hostPort": 1, "containerPort": 2, "protocol": "tcp"}]));
    rig.cni.add_network_list(list, &rt).unwrap();
}

fn valid(ctr: &str) -> Attachment {
    Attachment { container_id: ctr.into(), ifname: "eth0".into() }
}

#[test]
fn gc_deletes_stale_attachments_then_sends_gc_to_every_plugin() {
    let rig = Rig::new();
    let list = two_plugin_list(&rig, "1.1.0", json!({}));
    for ctr in ["keep", "stale"] {
        attach(&rig, &list, ctr);
    }
    // Another network's attachment and a corrupt entry must be left alone, not block GC.
    std::fs::write(rig.cache_file("othernet", "x", "eth0"), b"").unwrap();
    rig.clear_log();

    rig.cni.gc_network_list(&list, &[valid("keep")]).unwrap();
    assert_eq!(rig.calls(), calls(&[("DEL", "b"), ("DEL", "a"), ("GC", "a"), ("GC", "b")]));
    let log = rig.log();
    // The stale DEL is made with what was cached for it.
    assert_eq!(log[1].var("CNI_CONTAINERID"), "stale");
    assert_eq!(log[1].var("CNI_NETNS"), "/run/netns/stale");
    assert_eq!(log[1].var("CNI_ARGS"), "K8S_POD_NAME=stale");
    assert_eq!(log[1].stdin["runtimeConfig"]["portMappings"][0]["hostPort"], 1);
    assert_eq!(log[1].stdin["prevResult"]["interfaces"][0]["sandbox"], "/run/netns/stale");
    // GC: the plugin object with name/cniVersion and the valid attachments; only
    // CNI_COMMAND and CNI_PATH in the environment; capabilities untouched.
    let gc = &log[2];
    assert_eq!(gc.stdin["cni.dev/valid-attachments"], json!([{"containerID": "keep", "ifname": "eth0"}]));
    assert_eq!(gc.stdin["cni.dev/attachments"], gc.stdin["cni.dev/valid-attachments"]);
    assert_eq!((gc.stdin["name"].as_str(), gc.stdin["cniVersion"].as_str()), (Some("gcnet"), Some("1.1.0")));
    assert_eq!(gc.stdin["capabilities"], json!({"portMappings": true}));
    assert_eq!(support::cni_var_names(gc), ["CNI_COMMAND", "CNI_PATH"]);
    assert!(!rig.cache_file("gcnet", "stale", "eth0").exists());
    assert!(rig.cache_file("gcnet", "keep", "eth0").exists());
    assert!(rig.cache_file("othernet", "x", "eth0").exists());
}

#[test]
fn gc_collects_every_error_and_keeps_going() {
    let rig = Rig::new();
    rig.plugin("a").plugin("b");
    let failing = rig.list(json!({"cniVersion": "1.1.0", "name": "gcnet", "plugins": [
        {"type": "a", "testBehaviour": {"perCommand": {"GC": {"error": {"code": 5, "msg": "gc of a failed"}}}}},
        {"type": "b", "testBehaviour": {"perCommand": {"DEL": {"error": {"code": 3, "msg": "del of b failed"}}}}}]}));
    attach(&rig, &failing, "s1");
    attach(&rig, &failing, "s2");
    rig.clear_log();
    let err = rig.cni.gc_network_list(&failing, &[]).unwrap_err();
    let Error::Multiple(errors) = &err else { panic!("expected several errors, got {err}") };
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages[0].contains("del of b failed") && messages[1].contains("del of b failed"));
    assert!(messages[2].contains("gc of a failed"));
    assert_eq!(rig.calls(), calls(&[("DEL", "b"), ("DEL", "b"), ("GC", "a"), ("GC", "b")]));
    assert!(rig.cache_file("gcnet", "s1", "eth0").exists(), "a failed DEL keeps its cache entry");
}

#[test]
fn gc_before_1_1_0_only_deletes_and_disable_gc_does_nothing() {
    let rig = Rig::new();
    let list = two_plugin_list(&rig, "1.0.0", json!({}));
    attach(&rig, &list, "stale");
    rig.clear_log();
    rig.cni.gc_network_list(&list, &[]).unwrap();
    assert_eq!(rig.calls(), calls(&[("DEL", "b"), ("DEL", "a")]));

    let disabled = two_plugin_list(&rig, "1.1.0", json!({"disableGC": "true"}));
    attach(&rig, &disabled, "stale2");
    rig.clear_log();
    rig.cni.gc_network_list(&disabled, &[]).unwrap();
    assert!(rig.log().is_empty());
}

#[test]
fn status_asks_every_plugin_from_1_1_0_and_stops_at_the_first_failure() {
    let rig = Rig::new();
    rig.plugin("a").plugin("b").plugin("c");
    let list = rig.list(json!({"cniVersion": "1.1.0", "name": "st", "plugins": [
        {"type": "a"}, {"type": "b", "testBehaviour": {"perCommand": {"STATUS": {"error": {"code": 50, "msg": "no IPs left"}}}}}, {"type": "c"}]}));
    let err = rig.cni.status_network_list(&list).unwrap_err();
    assert_eq!(err.plugin_error().unwrap().code, 50);
    assert_eq!(rig.calls(), calls(&[("STATUS", "a"), ("STATUS", "b")]));
    assert_eq!(support::cni_var_names(&rig.log()[0]), ["CNI_COMMAND", "CNI_PATH"]);
    assert_eq!(rig.log()[0].stdin, json!({"type": "a", "name": "st", "cniVersion": "1.1.0"}));

    rig.clear_log();
    let old = rig.list(json!({"cniVersion": "1.0.0", "name": "st", "plugins": [{"type": "a"}]}));
    rig.cni.status_network_list(&old).unwrap();
    assert!(rig.log().is_empty(), "STATUS does not exist before 1.1.0");
}

#[test]
fn damaged_cache_files_never_block_del() {
    for damage in
        [&b""[..], b"\0\0\0\0", b"{\"kind\":\"cniCacheV1\",\"containerId\":", b"{\"cniVersion\":\"9.9.9\"}"]
    {
        let rig = Rig::new();
        let list = two_plugin_list(&rig, "1.0.0", json!({}));
        attach(&rig, &list, "c");
        let path = rig.cache_file("gcnet", "c", "eth0");
        std::fs::write(&path, damage).unwrap();
        let rt = RuntimeConf::new("c", "/run/netns/c", "eth0");
        assert!(rig.cni.cached_result(&list, &rt).is_err());
        assert!(rig.cni.check_network_list(&list, &rt).is_err(), "CHECK cannot work without the result");
        rig.clear_log();
        rig.cni.del_network_list(&list, &rt).unwrap();
        assert_eq!(rig.calls(), calls(&[("DEL", "b"), ("DEL", "a")]));
        assert!(rig.log().iter().all(|i| i.stdin.get("prevResult").is_none()));
        assert!(!path.exists(), "{damage:?}");
    }
}

#[test]
fn a_legacy_bare_result_is_used_as_prev_result() {
    let rig = Rig::new();
    let list = two_plugin_list(&rig, "0.4.0", json!({}));
    let path = rig.cache_file("gcnet", "c", "eth0");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, r#"{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.1.2.3/24"}]}"#)
        .unwrap();
    let rt = RuntimeConf::new("c", "/run/netns/c", "eth0");
    rig.cni.del_network_list(&list, &rt).unwrap();
    let prev = &rig.log()[0].stdin["prevResult"];
    assert_eq!(prev, &json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.1.2.3/24"}]}));
}

fn go_fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/go-libcni-cache-v1.json");
    serde_json::from_slice(&std::fs::read(path).expect("the Go cache fixture")).unwrap()
}

/// The cache file Go libcni (podman 4.3.1) wrote is read, listed, and drives a correct DEL:
/// test-plugin stand-ins for bridge, portmap, firewall and tuning are GC'd with the cached
/// CNI_ARGS, capability args and result.
#[test]
fn the_go_written_cache_is_read_and_used_for_del() {
    let rig = Rig::new();
    for name in ["bridge", "portmap", "firewall", "tuning"] {
        rig.plugin(name);
    }
    let fixture = go_fixture();
    let cid = fixture["containerId"].as_str().unwrap();
    let path = rig.cache_file("pcnih-net", cid, "eth0");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&fixture).unwrap()).unwrap();

    let attachments = rig.cni.cached_attachments(Some(cid)).unwrap();
    assert_eq!(attachments.len(), 1);
    let a = &attachments[0];
    assert_eq!((a.network.as_str(), a.ifname.as_str(), a.netns.as_str()), ("pcnih-net", "eth0", ""));
    assert_eq!(a.cni_args[2], ("IP".to_string(), "10.89.200.77".to_string()));
    let list = NetworkConfigList::from_bytes(&a.config).unwrap();
    assert_eq!(list.bytes, a.config);
    assert_eq!(list.version, cni_types::Version::V0_4_0);

    let rt = RuntimeConf::new(cid, "", "eth0");
    let cached = rig.cni.cached_result(&list, &rt).unwrap().unwrap();
    assert_eq!(cached.parse().unwrap().ips[0].address.to_string(), "10.89.200.77/24");

    rig.cni.gc_network_list(&list, &[]).unwrap();
    assert_eq!(
        rig.calls(),
        calls(&[("DEL", "tuning"), ("DEL", "firewall"), ("DEL", "portmap"), ("DEL", "bridge")])
    );
    let log = rig.log();
    let mut expected_prev = fixture["result"].clone();
    expected_prev.as_object_mut().unwrap().remove("dns"); // empty DNS is omitted
    for inv in &log {
        assert_eq!(inv.var("CNI_ARGS"), "IgnoreUnknown=1;K8S_POD_NAME=sleepy_faraday;IP=10.89.200.77");
        assert_eq!(inv.var("CNI_CONTAINERID"), cid);
        assert_eq!(inv.stdin["prevResult"], expected_prev);
        assert!(inv.stdin.get("capabilities").is_none());
    }
    assert_eq!(
        log[2].stdin["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 18099, "containerPort": 80, "protocol": "tcp"}]})
    );
    assert!(log[3].stdin.get("runtimeConfig").is_none(), "bridge enables ips, which was not supplied");
    assert_eq!(log[3].stdin["ipam"]["ranges"][0][0]["subnet"], "10.89.200.0/24");
    assert!(!path.exists());
}

/// A runtime killed between creating the cache's temporary file and renaming it into
/// place leaves it behind. GC removes this version's (`.<entry>.tmp.<pid>`) at once when
/// no writer holds its lock and keeps one a writer holds; older versions' unlocked
/// `.tmp-*` files go once they are older than a minute (a write takes microseconds).
#[test]
fn gc_removes_abandoned_temporary_cache_files() {
    let rig = Rig::new();
    let list = two_plugin_list(&rig, "1.1.0", json!({}));
    attach(&rig, &list, "keep");
    let results = rig.cache_file("gcnet", "keep", "eth0").parent().unwrap().to_path_buf();
    let now = std::time::SystemTime::now();
    let temp = |name: &str, age_secs: u64| {
        let path = results.join(name);
        std::fs::write(&path, b"{\"kind\":\"cniCacheV1\",\"contai").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(now - std::time::Duration::from_secs(age_secs)).unwrap();
        path
    };
    let abandoned = temp(".tmp-Xq3abandoned", 600);
    let in_flight = temp(".tmp-Zk9inflight", 2);
    let killed_now = temp(".gcnet-gone-eth0.tmp.77", 0);
    let held = temp(".gcnet-held-eth0.tmp.78", 600);
    let writer = std::fs::File::open(&held).unwrap();
    cni_os::lock::exclusive(&writer).unwrap();
    rig.cni.gc_network_list(&list, &[valid("keep")]).unwrap();
    assert!(!abandoned.exists(), "GC left the abandoned temporary file");
    assert!(in_flight.exists(), "GC removed a temporary file that may be a write in flight");
    assert!(!killed_now.exists(), "GC left the temporary file of a writer killed a moment ago");
    assert!(held.exists(), "GC removed a temporary file its writer still holds");
    assert!(rig.cache_file("gcnet", "keep", "eth0").exists());
}
