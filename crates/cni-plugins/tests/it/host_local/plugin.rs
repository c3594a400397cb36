//! host-local through the plugin SDK (ADD/DEL/CHECK/GC/STATUS), in-process.

use super::support;

use std::collections::HashMap;
use std::path::Path;

use cni_plugins::ipam::host_local::HostLocal;
use serde_json::{json, Value};
use support::{ip, ip_files};

/// Runs one verb; returns (exit code, stdout JSON or Null).
fn invoke(command: &str, container_id: &str, stdin: &Value, cni_args: &str) -> (i32, Value) {
    let mut env: HashMap<&str, String> = HashMap::new();
    env.insert("CNI_COMMAND", command.into());
    env.insert("CNI_PATH", "/usr/lib/cni".into());
    if !container_id.is_empty() {
        env.insert("CNI_CONTAINERID", container_id.into());
        env.insert("CNI_IFNAME", "eth0".into());
        env.insert("CNI_NETNS", "/var/run/netns/unused".into());
    }
    if !cni_args.is_empty() {
        env.insert("CNI_ARGS", cni_args.into());
    }
    let lookup = |key: &str| env.get(key).cloned();
    let input = serde_json::to_vec(stdin).unwrap();
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = cni_sdk::run_with(&HostLocal, &lookup, &mut input.as_slice(), &mut stdout, &mut stderr);
    let out = if stdout.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&stdout).unwrap()
    };
    (code, out)
}

fn net(data_dir: &Path, version: &str, resolv: &Path) -> Value {
    json!({
        "cniVersion": version,
        "name": "sdknet",
        "type": "host-local",
        "ipam": {
            "type": "host-local",
            "dataDir": data_dir,
            "resolvConf": resolv,
            "ranges": [[{"subnet": "10.33.0.0/29"}], [{"subnet": "fd33::/125"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.33.0.1"}]
        }
    })
}

#[test]
fn add_del_check_gc_status_through_the_sdk() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.33.0.53\nsearch example.org\n").unwrap();
    let conf = net(tmp.path(), "1.1.0", &resolv);
    let dir = tmp.path().join("sdknet");

    let (code, result) = invoke("ADD", "ctr1", &conf, "IgnoreUnknown=1;K8S_POD_NAME=p");
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["ips"][0]["address"], "10.33.0.2/29");
    assert_eq!(result["ips"][0]["gateway"], "10.33.0.1");
    assert_eq!(result["ips"][1]["address"], "fd33::2/125");
    assert!(result["ips"][0].get("interface").is_none(), "abbreviated IPAM result: {result}");
    assert_eq!(result["routes"][1]["gw"], "10.33.0.1");
    assert_eq!(result["dns"]["nameservers"][0], "10.33.0.53");
    assert_eq!(result["dns"]["search"][0], "example.org");

    // Unknown CNI_ARGS without IgnoreUnknown are refused like the reference (code 4).
    let (code, err) = invoke("ADD", "ctr2", &conf, "FOO=bar");
    assert_eq!((code, err["code"].as_i64()), (1, Some(4)), "{err}");

    // CHECK with the prevResult; a prevResult naming another address fails.
    let mut with_prev = conf.clone();
    with_prev["prevResult"] = result.clone();
    assert_eq!(invoke("CHECK", "ctr1", &with_prev, "").0, 0);
    let mut wrong_prev = with_prev.clone();
    wrong_prev["prevResult"]["ips"][0]["address"] = json!("10.33.0.5/29");
    assert_eq!(invoke("CHECK", "ctr1", &wrong_prev, "").0, 1);

    // Requested address through CNI_ARGS, then the range is full: ADD gets code 11 and
    // STATUS code 50.
    for n in 2..=5 {
        let (code, out) = invoke("ADD", &format!("ctr{n}"), &conf, "");
        assert_eq!(code, 0, "{out}");
    }
    let (code, err) = invoke("ADD", "ctr9", &conf, "");
    assert_eq!((code, err["code"].as_i64()), (1, Some(11)), "{err}");
    let (code, err) = invoke("STATUS", "", &conf, "");
    assert_eq!((code, err["code"].as_i64()), (1, Some(50)), "{err}");

    // DEL with the prevResult releases, and twice is fine.
    assert_eq!(invoke("DEL", "ctr1", &with_prev, "").0, 0);
    assert_eq!(invoke("DEL", "ctr1", &with_prev, "").0, 0);
    assert!(!ip_files(&dir).contains(&ip("10.33.0.2")));
    assert_eq!(invoke("STATUS", "", &conf, "").0, 0);
    let (code, out) = invoke("ADD", "ctr9", &conf, "IP=10.33.0.2");
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["ips"][0]["address"], "10.33.0.2/29");

    // GC keeps only the valid attachments.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "ctr3", "ifname": "eth0"}]);
    let (code, out) = invoke("GC", "", &gc, "");
    assert_eq!(code, 0, "{out}");
    assert_eq!(ip_files(&dir), vec![ip("10.33.0.4"), ip("fd33::4")]);
}

#[test]
fn old_versions_get_their_result_shape_and_bad_config_code_7() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("none");
    let mut conf = net(tmp.path(), "0.3.1", &resolv);
    conf["ipam"].as_object_mut().unwrap().remove("resolvConf");
    let (code, out) = invoke("ADD", "old", &conf, "");
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["cniVersion"], "0.3.1");
    assert_eq!(out["ips"][0]["version"], "4");

    let mut bad = conf.clone();
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.0.0.0/31"}]]);
    let (code, err) = invoke("ADD", "x", &bad, "");
    assert_eq!((code, err["code"].as_i64()), (1, Some(7)), "{err}");
    assert!(err["msg"].as_str().unwrap().contains("ipam.ranges[0][0].subnet"), "{err}");
}

/// Clears the immutable attribute again however the test ends, so the temp dir can go.
struct Immutable<'a>(Vec<&'a Path>);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::process::Command::new("chattr").arg("-i").arg(path).status();
        }
    }
}

#[test]
fn gc_reports_each_address_it_could_not_release_and_releases_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.33.0.53\n").unwrap();
    let conf = net(tmp.path(), "1.1.0", &resolv);
    let dir = tmp.path().join("sdknet");
    for ctr in ["stuck", "stale"] {
        let (code, out) = invoke("ADD", ctr, &conf, "");
        assert_eq!(code, 0, "{out}");
    }
    // An immutable file cannot be unlinked, even by root: GC's removal fails for real.
    let stuck = [dir.join("10.33.0.2"), dir.join("fd33::2")];
    let _guard = Immutable(stuck.iter().map(|p| p.as_path()).collect());
    for path in &stuck {
        let status = std::process::Command::new("chattr").arg("+i").arg(path).status().unwrap();
        assert!(status.success(), "chattr +i {}", path.display());
    }
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let (code, err) = invoke("GC", "", &gc, "");
    assert_eq!(code, 1, "{err}");
    // One entry per address, in the directory's order.
    let msg = err["msg"].as_str().unwrap();
    assert!(msg.starts_with("GC could not release 2 objects: "), "{err}");
    assert!(msg.contains("address 10.33.0.2") && msg.contains("address fd33::2"), "{err}");
    let mut details: Vec<&str> = err["details"].as_str().unwrap().lines().collect();
    details.sort();
    assert_eq!(details.len(), 2, "{err}");
    assert!(
        details[0].starts_with("address 10.33.0.2: ") && details[1].starts_with("address fd33::2: "),
        "{err}"
    );
    assert!(details.iter().all(|d| d.contains("Operation not permitted")), "{err}");
    // GC carried on past the failures: the other attachment's addresses are gone.
    assert_eq!(ip_files(&dir), vec![ip("10.33.0.2"), ip("fd33::2")]);
}
