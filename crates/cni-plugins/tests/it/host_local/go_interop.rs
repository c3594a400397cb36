//! Interoperability with the Go reference host-local (containernetworking-plugins, Debian
//! package, at /usr/lib/cni/host-local) on one shared data directory, in both directions.
//! IPAM plugins need no network namespace, so no privileges are needed.

use super::support;

use std::collections::HashSet;
use std::fs;

use cni_plugins::ipam::host_local::{self, HostLocalConf, HostLocalError};
use support::{go_result_ips, ip, ip_files, net_conf_json, run_go};

// Two range sets; the IPv6 one has two equal runs of zero groups, where Go and Rust must
// print the same (first-run-compressed) file name: fd00:1::1:0:0:2.
const RANGES: &str = r#""ranges":[[{"subnet":"10.9.0.0/24"}],[{"subnet":"fd00:1:0:0:1::/120"}]]"#;

#[test]
fn go_allocates_ours_sees_and_releases_and_vice_versa() {
    let tmp = tempfile::tempdir().unwrap();
    let json = net_conf_json("mixnet", tmp.path(), RANGES);
    let conf = HostLocalConf::parse(json.as_bytes(), None).unwrap();
    let dir = tmp.path().join("mixnet");

    // Go allocates for c1 and c2.
    let (ok, r1) = run_go("ADD", &json, "c1", "eth0", None);
    assert!(ok, "{r1}");
    let (ok, r2) = run_go("ADD", &json, "c2", "eth0", None);
    assert!(ok, "{r2}");
    let go_c1 = go_result_ips(&r1);
    assert_eq!(go_c1, vec![ip("10.9.0.2"), ip("fd00:1::1:0:0:2")]);

    // Ours sees Go's allocations, refuses a duplicate, continues after Go's last address.
    host_local::check(&conf, "c1", "eth0", &go_c1).unwrap();
    assert!(matches!(
        host_local::allocate(&conf, "c2", "eth0"),
        Err(HostLocalError::AlreadyAllocated { .. })
    ));
    let ours = host_local::allocate(&conf, "c3", "eth0").unwrap();
    let ours_ips: Vec<_> = ours.iter().map(|a| a.address.addr()).collect();
    assert_eq!(ours_ips, vec![ip("10.9.0.4"), ip("fd00:1::1:0:0:4")]);

    // Ours releases Go's c1 by container ID alone.
    let mut released = host_local::release(&conf, "c1", "eth0", &[]).unwrap().released;
    released.sort();
    assert_eq!(released, go_c1);

    // Go sees ours: it refuses a duplicate for c3 and never hands out c3's addresses.
    let (ok, dup) = run_go("ADD", &json, "c3", "eth0", None);
    assert!(!ok, "Go allowed a duplicate: {dup}");
    assert!(dup["msg"].as_str().unwrap().contains("duplicate allocation"), "{dup}");
    let (ok, r4) = run_go("ADD", &json, "c4", "eth0", None);
    assert!(ok, "{r4}");
    let go_c4 = go_result_ips(&r4);
    assert_eq!(go_c4, vec![ip("10.9.0.5"), ip("fd00:1::1:0:0:5")]);
    let (ok, taken) = run_go("ADD", &json, "c5", "eth0", Some("IP=10.9.0.4"));
    assert!(!ok, "Go handed out our address: {taken}");

    // Go releases ours via DEL; ours then no longer sees it, and DEL stays idempotent.
    let (ok, del) = run_go("DEL", &json, "c3", "eth0", None);
    assert!(ok, "{del}");
    assert!(!dir.join("10.9.0.4").exists());
    assert!(!dir.join("fd00:1::1:0:0:4").exists());
    // Go's recursive walk read our index files and left them alone.
    assert!(dir.join(".cni-rs-index/table").exists());
    assert!(dir.join(".cni-rs-index/stamp").exists());
    assert!(host_local::check(&conf, "c3", "eth0", &[]).is_err());
    assert!(host_local::release(&conf, "c3", "eth0", &[]).unwrap().released.is_empty());

    // Ours allocates after Go's last address again; Go's c2/c4 stay untouched.
    let again = host_local::allocate(&conf, "c6", "eth0").unwrap();
    assert_eq!(again[0].address.addr(), ip("10.9.0.6"));
    host_local::check(&conf, "c2", "eth0", &go_result_ips(&r2)).unwrap();
    host_local::check(&conf, "c4", "eth0", &go_c4).unwrap();

    // Go's walk of the directory (GetByID/ReleaseByID) is not disturbed by our index.
    for (id, expect_ok) in [("c2", true), ("c4", true), ("c6", true), ("c1", true)] {
        let (ok, out) = run_go("DEL", &json, id, "eth0", None);
        assert_eq!(ok, expect_ok, "{id}: {out}");
    }
    assert!(ip_files(&dir).is_empty(), "{:?}", ip_files(&dir));
    assert!(host_local::check(&conf, "c6", "eth0", &[]).is_err());
    assert_eq!(fs::read(dir.join("lock")).unwrap(), b"");
}

#[test]
fn alternating_go_and_ours_until_exhausted_never_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    // 10.8.0.2 .. 10.8.0.14 (the gateway .1 and broadcast .15 are never handed out).
    let json = net_conf_json("altnet", tmp.path(), r#""subnet":"10.8.0.0/28""#);
    let conf = HostLocalConf::parse(json.as_bytes(), None).unwrap();
    let mut seen = HashSet::new();
    for n in 0..13 {
        let id = format!("ctr{n}");
        let got = if n % 2 == 0 {
            let (ok, out) = run_go("ADD", &json, &id, "eth0", None);
            assert!(ok, "{out}");
            go_result_ips(&out)[0]
        } else {
            host_local::allocate(&conf, &id, "eth0").unwrap()[0].address.addr()
        };
        assert!(seen.insert(got), "{got} handed out twice");
        assert!(got != ip("10.8.0.1") && got != ip("10.8.0.15") && got != ip("10.8.0.0"));
    }
    let err = host_local::allocate(&conf, "late", "eth0").unwrap_err();
    assert_eq!(err.to_string(), "no IP addresses available in range set: 10.8.0.1-10.8.0.14");
    let (ok, out) = run_go("ADD", &json, "late", "eth0", None);
    assert!(!ok);
    assert!(
        out["msg"].as_str().unwrap().contains("no IP addresses available in range set: 10.8.0.1-10.8.0.14"),
        "{out}"
    );
    assert!(host_local::status(&conf).is_err());
    // Go frees one; ours takes exactly that one.
    assert!(run_go("DEL", &json, "ctr4", "eth0", None).0);
    let freed = host_local::allocate(&conf, "late", "eth0").unwrap()[0].address.addr();
    assert_eq!(freed, ip("10.8.0.6"));
}
