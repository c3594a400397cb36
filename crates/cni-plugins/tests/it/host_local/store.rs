//! host-local behaviour against temporary data directories (no privileges needed).

use super::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cni_plugins::ipam::host_local::{self, HostLocalConf, HostLocalError};
use cni_sdk::Attachment;
use support::{conf, ip, ip_files};

/// The state the Go host-local (containernetworking-plugins 1.1.1) left after two ADDs
/// (`ctr1`, `ctr2` on eth0) into 10.77.0.0/24 and fd77::/64; see `fixtures/README.md`.
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/go-host-local-1.1.1/fixnet");

fn key(id: &str, ifname: &str) -> Attachment {
    Attachment::new(id, ifname)
}

fn addrs(allocs: &[host_local::Allocation]) -> Vec<String> {
    allocs.iter().map(|a| a.address.to_string()).collect()
}

/// Copies the Go-written fixture into `data_dir/fixnet` with the modes Go gives its files.
fn install_fixture(data_dir: &Path) {
    let dst = data_dir.join("fixnet");
    fs::create_dir_all(&dst).unwrap();
    for entry in fs::read_dir(FIXTURE).expect("Go fixture present") {
        let entry = entry.unwrap();
        let target = dst.join(entry.file_name());
        fs::copy(entry.path(), &target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    }
}

#[test]
fn go_fixture_is_seen_released_and_continued() {
    let tmp = tempfile::tempdir().unwrap();
    install_fixture(tmp.path());
    let c = conf("fixnet", tmp.path(), r#""ranges":[[{"subnet":"10.77.0.0/24"}],[{"subnet":"fd77::/64"}]]"#);
    host_local::check(&c, "ctr1", "eth0", &[ip("10.77.0.2"), ip("fd77::2")]).unwrap();
    host_local::check(&c, "ctr2", "eth0", &[]).unwrap();
    assert!(host_local::check(&c, "ctr1", "eth0", &[ip("10.77.0.3")]).is_err());
    assert!(host_local::check(&c, "ctr9", "eth0", &[]).is_err());
    // Duplicate ADD is refused, as by the reference.
    let dup = host_local::allocate(&c, "ctr1", "eth0").unwrap_err();
    assert!(dup.to_string().contains("duplicate allocation is not allowed"), "{dup}");

    // DEL by ID alone (no prevResult) finds Go's allocation.
    let released = host_local::release(&c, "ctr1", "eth0", &[]).unwrap().released;
    assert_eq!(released.len(), 2, "{released:?}");
    let dir = tmp.path().join("fixnet");
    assert_eq!(ip_files(&dir), vec![ip("10.77.0.3"), ip("fd77::3")]);

    // Next-fit continues after Go's last_reserved_ip: .4, not the freed .2.
    let allocs = host_local::allocate(&c, "ctr3", "eth0").unwrap();
    assert_eq!(addrs(&allocs), ["10.77.0.4/24", "fd77::4/64"]);
    assert_eq!(allocs[0].gateway, ip("10.77.0.1"));
    assert_eq!(fs::read(dir.join("10.77.0.4")).unwrap(), b"ctr3\r\neth0");
    assert_eq!(fs::read(dir.join("fd77::4")).unwrap(), b"ctr3\r\neth0");
    assert_eq!(fs::read(dir.join("last_reserved_ip.0")).unwrap(), b"10.77.0.4");
    assert_eq!(fs::read(dir.join("last_reserved_ip.1")).unwrap(), b"fd77::4");
    let mode = fs::metadata(dir.join("10.77.0.4")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn exhaustion_names_the_range_set_and_status_reports_it() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("small", tmp.path(), r#""subnet":"10.0.0.0/30""#);
    host_local::status(&c).unwrap();
    let a = host_local::allocate(&c, "ctr1", "eth0").unwrap();
    assert_eq!(addrs(&a), ["10.0.0.2/30"]);
    let err = host_local::allocate(&c, "ctr2", "eth0").unwrap_err();
    assert_eq!(err.to_string(), "no IP addresses available in range set: 10.0.0.1-10.0.0.2");
    assert_eq!(err.cni_code(), 11);
    assert!(matches!(host_local::status(&c), Err(HostLocalError::Exhausted { .. })));
    host_local::release(&c, "ctr1", "eth0", &[]).unwrap();
    host_local::status(&c).unwrap();
    assert_eq!(addrs(&host_local::allocate(&c, "ctr2", "eth0").unwrap()), ["10.0.0.2/30"]);
}

fn conf_with(data_dir: &Path, extra: &str, cni_args: Option<&str>) -> HostLocalConf {
    let json = format!(
        r#"{{"cniVersion":"1.0.0","name":"req","ipam":{{"dataDir":"{}","subnet":"10.0.0.0/24"}}{extra}}}"#,
        data_dir.display()
    );
    HostLocalConf::parse(json.as_bytes(), cni_args).unwrap()
}

#[test]
fn requested_ip_taken_idempotent_gateway_and_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let want5 = conf_with(tmp.path(), r#","runtimeConfig":{"ips":["10.0.0.5/24"]}"#, None);
    assert_eq!(addrs(&host_local::allocate(&want5, "ctr1", "eth0").unwrap()), ["10.0.0.5/24"]);
    let err = host_local::allocate(&want5, "ctr2", "eth0").unwrap_err();
    assert_eq!(
        err.to_string(),
        "requested IP address 10.0.0.5 is not available in range set 10.0.0.1-10.0.0.254"
    );
    assert_eq!(err.cni_code(), 11);
    // The same attachment asking again gets what it holds.
    assert_eq!(addrs(&host_local::allocate(&want5, "ctr1", "eth0").unwrap()), ["10.0.0.5/24"]);

    let gw = conf_with(tmp.path(), "", Some("IgnoreUnknown=1;IP=10.0.0.1"));
    let err = host_local::allocate(&gw, "ctr3", "eth0").unwrap_err();
    assert!(err.to_string().contains("gateway"), "{err}");
    assert_eq!(err.cni_code(), 7);

    let outside = conf_with(tmp.path(), r#","args":{"cni":{"ips":["192.168.1.1"]}}"#, None);
    let err = host_local::allocate(&outside, "ctr3", "eth0").unwrap_err();
    assert_eq!(err.to_string(), "failed to allocate all requested IPs: 192.168.1.1");
    // Nothing was left behind by the failed ADDs.
    assert_eq!(ip_files(&tmp.path().join("req")), vec![ip("10.0.0.5")]);
}

#[test]
fn podman_sends_the_same_ip_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf_with(
        tmp.path(),
        r#","runtimeConfig":{"ips":["10.0.0.50","10.0.0.50"]}"#,
        Some("IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.0.0.50"),
    );
    assert_eq!(addrs(&host_local::allocate(&c, "ctr1", "eth0").unwrap()), ["10.0.0.50/24"]);
    assert_eq!(ip_files(&tmp.path().join("req")), vec![ip("10.0.0.50")]);
}

#[test]
fn runtime_config_ips_win_over_cni_args() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf_with(
        tmp.path(),
        r#","args":{"cni":{"ips":["10.0.0.8"]}},"runtimeConfig":{"ips":["10.0.0.9"]}"#,
        Some("IP=10.0.0.7"),
    );
    assert_eq!(addrs(&host_local::allocate(&c, "ctr1", "eth0").unwrap()), ["10.0.0.9/24"]);
    // Two requests of equal precedence for one range set cannot both be honoured.
    let both = conf_with(tmp.path(), r#","runtimeConfig":{"ips":["10.0.0.20","10.0.0.21"]}"#, None);
    let err = host_local::allocate(&both, "ctr2", "eth0").unwrap_err();
    assert_eq!(err.to_string(), "failed to allocate all requested IPs: 10.0.0.21");
}

#[test]
fn failed_second_range_set_rolls_back_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("two", tmp.path(), r#""ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/30"}]]"#);
    host_local::allocate(&c, "ctr1", "eth0").unwrap();
    let err = host_local::allocate(&c, "ctr2", "eth0").unwrap_err();
    assert!(err.to_string().contains("10.2.0.1-10.2.0.2"), "{err}");
    assert_eq!(ip_files(&tmp.path().join("two")), vec![ip("10.1.0.2"), ip("10.2.0.2")]);
}

#[test]
fn truncated_and_garbage_files_do_not_break_del_or_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("trunc", tmp.path(), r#""subnet":"10.0.0.0/24""#);
    let dir = tmp.path().join("trunc");
    for id in ["ctr1", "ctr2", "ctr3", "ctr4"] {
        host_local::allocate(&c, id, "eth0").unwrap();
    }
    fs::write(dir.join("10.0.0.2"), b"").unwrap(); // ctr1's, truncated to nothing
    fs::write(dir.join("10.0.0.3"), b"ctr2\r\neth").unwrap(); // ctr2's, cut short
    fs::write(dir.join("10.0.0.4"), [0xff, 0xfe, 0x00]).unwrap(); // ctr3's, garbage

    // DEL with the prevResult releases the emptied file; without it, the index (complete:
    // damage rewrites a file, it does not change the directory) vouches for the file.
    assert_eq!(
        host_local::release(&c, "ctr1", "eth0", &[ip("10.0.0.2")]).unwrap().released,
        vec![ip("10.0.0.2")]
    );
    assert_eq!(host_local::release(&c, "ctr2", "eth0", &[]).unwrap().released, vec![ip("10.0.0.3")]);
    assert_eq!(
        host_local::release(&c, "ctr3", "eth0", &[ip("10.0.0.4")]).unwrap().released,
        vec![ip("10.0.0.4")]
    );
    // A file cut short that no trusted index entry vouches for (written by someone else:
    // the index is rebuilt from the files) is left to GC; a DEL cannot tell it is its own.
    fs::write(dir.join("10.0.0.9"), b"ctr9\r\ne").unwrap();
    assert_eq!(
        host_local::release(&c, "ctr9", "eth0", &[]).unwrap().released,
        Vec::<std::net::IpAddr>::new()
    );
    let outcome = host_local::gc(&c, &[key("ctr4", "eth0")]).unwrap();
    assert_eq!(outcome.released, vec![ip("10.0.0.9")]);
    assert!(outcome.failures.is_empty());
    assert_eq!(ip_files(&dir), vec![ip("10.0.0.5")]);
    host_local::check(&c, "ctr4", "eth0", &[ip("10.0.0.5")]).unwrap();
}

#[test]
fn gc_releases_everything_not_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("gc", tmp.path(), r#""ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"}]]"#);
    for (id, ifname) in [("a", "eth0"), ("a", "eth1"), ("b", "eth0"), ("c", "eth0")] {
        host_local::allocate(&c, id, ifname).unwrap();
    }
    // A legacy file (container ID only) of a valid container stays, of another goes.
    let dir = tmp.path().join("gc");
    fs::write(dir.join("10.0.0.100"), "b").unwrap();
    fs::write(dir.join("10.0.0.101"), "zzz").unwrap();
    let mut released = host_local::gc(&c, &[key("a", "eth1"), key("b", "eth0")]).unwrap().released;
    released.sort();
    assert_eq!(
        released,
        vec![ip("10.0.0.2"), ip("10.0.0.5"), ip("10.0.0.101"), ip("fd00::2"), ip("fd00::5")]
    );
    host_local::check(&c, "a", "eth1", &[ip("10.0.0.3"), ip("fd00::3")]).unwrap();
    // Released attachments can be added again (the index forgot them).
    assert_eq!(addrs(&host_local::allocate(&c, "a", "eth0").unwrap()), ["10.0.0.6/24", "fd00::6/64"]);
}

#[test]
fn reservations_made_behind_our_back_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("foreign", tmp.path(), r#""subnet":"10.0.0.0/24""#);
    host_local::allocate(&c, "ours", "eth0").unwrap();
    // What the Go plugin does on ADD: an address file and last_reserved_ip rewritten in place.
    let dir = tmp.path().join("foreign");
    fs::write(dir.join("10.0.0.9"), "theirs\r\neth0").unwrap();
    fs::write(dir.join("last_reserved_ip.0"), "10.0.0.9").unwrap();
    let err = host_local::allocate(&c, "theirs", "eth0").unwrap_err();
    assert!(matches!(err, HostLocalError::AlreadyAllocated { .. }), "{err}");
    assert_eq!(host_local::release(&c, "theirs", "eth0", &[]).unwrap().released, vec![ip("10.0.0.9")]);
    // Legacy files are released with any interface of their container.
    fs::write(dir.join("10.0.0.20"), "old").unwrap();
    assert_eq!(host_local::release(&c, "old", "eth3", &[]).unwrap().released, vec![ip("10.0.0.20")]);
    // A stale index entry (Go released and re-gave the address) is not trusted.
    fs::write(dir.join("10.0.0.2"), "other\r\neth0").unwrap();
    assert_eq!(
        host_local::release(&c, "ours", "eth0", &[]).unwrap().released,
        Vec::<std::net::IpAddr>::new()
    );
    assert_eq!(fs::read(dir.join("10.0.0.2")).unwrap(), b"other\r\neth0");
}

#[test]
fn release_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("idem", tmp.path(), r#""subnet":"10.0.0.0/24""#);
    host_local::allocate(&c, "ctr1", "eth0").unwrap();
    assert_eq!(host_local::release(&c, "ctr1", "eth0", &[]).unwrap().released.len(), 1);
    assert_eq!(host_local::release(&c, "ctr1", "eth0", &[]).unwrap().released.len(), 0);
    assert_eq!(host_local::release(&c, "never", "eth0", &[ip("10.0.0.77")]).unwrap().released.len(), 0);
}

#[test]
fn an_interrupted_operation_forces_a_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf("crash", tmp.path(), r#""subnet":"10.0.0.0/24""#);
    host_local::allocate(&c, "ctr1", "eth0").unwrap();
    host_local::allocate(&c, "ctr2", "eth0").unwrap();
    let index = tmp.path().join("crash/.cni-rs-index");
    // As if a process died after spoiling the stamp and while rewriting the table.
    fs::remove_file(index.join("stamp")).unwrap();
    fs::write(index.join("table"), "cni-rs host-local index ta").unwrap();
    assert_eq!(host_local::release(&c, "ctr1", "eth0", &[]).unwrap().released, vec![ip("10.0.0.2")]);
    assert_eq!(host_local::release(&c, "ctr2", "eth0", &[]).unwrap().released, vec![ip("10.0.0.3")]);
    assert!(index.join("stamp").exists());
    // The rebuilt table lists nothing any more, and files of the older one-file-per-
    // attachment layout are removed by a rebuild.
    fs::write(index.join("ctr9:eth0"), "cni-rs host-local attachment index v1\n10.0.0.9\n").unwrap();
    fs::remove_file(index.join("stamp")).unwrap();
    host_local::allocate(&c, "ctr3", "eth0").unwrap();
    let names: Vec<String> = fs::read_dir(&index)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.contains(&"ctr9:eth0".to_string()), "{names:?}");
}
