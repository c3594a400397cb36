//! host-local's network directory against a local unprivileged user: a directory another user can write into, or owns, is refused before anything is
//! read or written in it; no file in it is opened through a link; and what stands in the
//! place of host-local's own files (a directory where the lock or a reservation belongs)
//! is repaired, with a note on stderr, instead of blocking every ADD and DEL or leaking the
//! address. The attacks run as `nobody`. Needs root.

use crate::common;

use cni_testkit::runner::{PluginCall, PluginOutput};
use cni_testkit::unprivileged::{as_nobody, NOBODY};
use common::ok;
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const NETWORK: &str = "psnet";

/// One usable address: 10.181.0.2 (.1 is the gateway).
fn conf(data_dir: &Path) -> Value {
    json!({"cniVersion": "1.1.0", "name": NETWORK, "type": "host-local",
        "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": "10.181.0.0/30"}]]}})
}

fn host_local(verb: &str, container_id: &str, conf: &Value) -> PluginOutput {
    PluginCall::new(common::plugin("host-local"), verb)
        .container_id(container_id)
        .netns("/var/run/netns/ps-unused")
        .config(conf)
        .run()
}

/// A data directory nobody can reach (0755 all the way), holding `victim`, a file of root's
/// outside the network directory.
fn data_dir_with_victim() -> (tempfile::TempDir, std::path::PathBuf) {
    let data = tempfile::tempdir().unwrap();
    fs::set_permissions(data.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let victim = data.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    (data, victim)
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_link_planted_as_last_reserved_ip_is_never_written_through() {
    let (data, victim) = data_dir_with_victim();
    let net_dir = data.path().join(NETWORK);
    fs::create_dir(&net_dir).unwrap();
    // An insecure setup: the network directory is open to everyone, and nobody plants a
    // link where host-local records its last address.
    fs::set_permissions(&net_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let link = net_dir.join("last_reserved_ip.0");
    let planted = as_nobody(&format!("ln -s '{}' '{}'", victim.display(), link.display()));
    assert!(planted.status.success(), "{}", String::from_utf8_lossy(&planted.stderr));

    // Refused as a whole: code 5 naming the directory and why; nothing written anywhere.
    let err = host_local("ADD", "ps-ctr1", &conf(data.path())).error();
    assert_eq!(err.code, 5, "{err:?}");
    assert!(err.msg.contains(&net_dir.display().to_string()), "{}", err.msg);
    assert!(err.msg.contains("writable by group or others (mode 0777)"), "{}", err.msg);
    assert_eq!(names_in(&net_dir), ["last_reserved_ip.0"]);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");

    // The administrator closes the directory; the link is still there. ADD works, does not
    // write through the link but replaces it with the file, and says so.
    fs::set_permissions(&net_dir, fs::Permissions::from_mode(0o755)).unwrap();
    let out = host_local("ADD", "ps-ctr1", &conf(data.path()));
    assert!(out.stderr.contains("removed the symbolic link"), "{}", out.stderr);
    assert_eq!(out.json()["ips"][0]["address"], "10.181.0.2/30");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_file());
    assert_eq!(fs::read_to_string(&link).unwrap(), "10.181.0.2");
}

#[test]
fn a_network_directory_another_user_owns_is_refused() {
    let (data, _victim) = data_dir_with_victim();
    // A shared, sticky data directory (like /tmp): nobody makes the network's directory
    // first and fills it to steer or block allocations.
    fs::set_permissions(data.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let net_dir = data.path().join(NETWORK);
    let made = as_nobody(&format!(
        "mkdir -m 0755 '{dir}' && printf 'other\\r\\neth0' > '{dir}/10.181.0.2'",
        dir = net_dir.display()
    ));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    assert_eq!(fs::metadata(&net_dir).unwrap().uid(), NOBODY);

    for verb in ["ADD", "DEL", "CHECK", "STATUS"] {
        let err = host_local(verb, "ps-ctr1", &conf(data.path())).error();
        assert_eq!(err.code, 5, "{verb}: {err:?}");
        assert!(err.msg.contains(&net_dir.display().to_string()), "{verb}: {}", err.msg);
        assert!(err.msg.contains(&format!("owned by uid {NOBODY}")), "{verb}: {}", err.msg);
    }
    // Nothing of ours was made in it: no lock, no hint, no index.
    assert_eq!(names_in(&net_dir), ["10.181.0.2"]);
}

#[test]
fn a_directory_in_place_of_the_lock_is_repaired_and_add_and_del_work() {
    let (data, _victim) = data_dir_with_victim();
    let conf = conf(data.path());
    let net_dir = data.path().join(NETWORK);
    ok(host_local("ADD", "ps-ctr1", &conf));
    ok(host_local("DEL", "ps-ctr1", &conf));
    // A directory with content where the lock belongs (a restore gone wrong).
    let lock = net_dir.join("lock");
    fs::remove_file(&lock).unwrap();
    fs::create_dir(&lock).unwrap();
    fs::write(lock.join("kept"), "someone's data").unwrap();

    let out = host_local("ADD", "ps-ctr2", &conf);
    let aside = net_dir.join(".lock.damaged.0");
    let note = format!("host-local: repaired {}: the lock was not a file", lock.display());
    assert!(out.stderr.contains(&note), "{}", out.stderr);
    assert!(out.stderr.contains(&aside.display().to_string()), "{}", out.stderr);
    assert_eq!(out.json()["ips"][0]["address"], "10.181.0.2/30");
    assert!(fs::symlink_metadata(&lock).unwrap().is_file());
    // Moved aside, not deleted.
    assert_eq!(fs::read_to_string(aside.join("kept")).unwrap(), "someone's data");

    // An empty directory is simply removed; DEL works past it as well.
    fs::remove_file(&lock).unwrap();
    fs::create_dir(&lock).unwrap();
    let out = host_local("DEL", "ps-ctr2", &conf);
    assert!(out.stderr.contains("removed the empty directory"), "{}", out.stderr);
    ok(out);
    assert!(!net_dir.join("10.181.0.2").exists(), "{:?}", names_in(&net_dir));
}

#[test]
fn a_directory_in_place_of_a_reservation_is_freed_by_del_and_by_gc() {
    let (data, _victim) = data_dir_with_victim();
    let conf = conf(data.path());
    let reservation = data.path().join(NETWORK).join("10.181.0.2");
    let prev = host_local("ADD", "ps-ctr1", &conf).json();
    fs::remove_file(&reservation).unwrap();
    fs::create_dir(&reservation).unwrap();
    // The range's only address is taken by the directory.
    let err = host_local("ADD", "ps-ctr2", &conf).error();
    assert_eq!(err.code, 11, "{err:?}");

    // DEL of the attachment the address belonged to frees it, and says so.
    let mut del_conf = conf.clone();
    del_conf["prevResult"] = prev;
    let out = host_local("DEL", "ps-ctr1", &del_conf);
    assert!(
        out.stderr.contains(&format!("host-local: repaired {}", reservation.display())),
        "{}",
        out.stderr
    );
    ok(out);
    let again = host_local("ADD", "ps-ctr2", &conf).json();
    assert_eq!(again["ips"][0]["address"], "10.181.0.2/30");

    // GC frees one that no attachment vouches for: nobody holds a directory.
    ok(host_local("DEL", "ps-ctr2", &conf));
    fs::create_dir(&reservation).unwrap();
    fs::write(reservation.join("kept"), "x").unwrap();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = PluginCall::new(common::plugin("host-local"), "GC").config(&gc).run();
    assert!(out.stderr.contains("moved the directory and its content aside"), "{}", out.stderr);
    ok(out);
    assert_eq!(host_local("ADD", "ps-ctr3", &conf).json()["ips"][0]["address"], "10.181.0.2/30");
}

#[test]
fn links_in_place_of_the_index_files_are_never_written_through() {
    let (data, victim) = data_dir_with_victim();
    let conf = conf(data.path());
    let index = data.path().join(NETWORK).join(".cni-rs-index");
    ok(host_local("ADD", "ps-ctr1", &conf));
    for name in ["table", "table.new", "stamp"] {
        let _ = fs::remove_file(index.join(name));
        std::os::unix::fs::symlink(&victim, index.join(name)).unwrap();
    }
    ok(host_local("DEL", "ps-ctr1", &conf));
    assert_eq!(host_local("ADD", "ps-ctr2", &conf).json()["ips"][0]["address"], "10.181.0.2/30");
    ok(host_local("DEL", "ps-ctr2", &conf));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    assert!(!fs::symlink_metadata(index.join("table")).unwrap().file_type().is_symlink());
}

#[test]
fn a_data_directory_others_can_rename_in_is_refused_before_anything_is_made() {
    let (data, _victim) = data_dir_with_victim();
    // World-writable without the sticky bit: nobody could rename the network directory
    // away between host-local's checks and its writes, and put a link in its place.
    fs::set_permissions(data.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let err = host_local("ADD", "ps-ctr1", &conf(data.path())).error();
    assert_eq!(err.code, 5, "{err:?}");
    assert!(err.msg.contains(&data.path().display().to_string()), "{}", err.msg);
    assert!(err.msg.contains("without the sticky bit (mode 0777)"), "{}", err.msg);
    assert!(!data.path().join(NETWORK).exists());
    // With the sticky bit (as /tmp) only an entry's owner may rename it: accepted.
    fs::set_permissions(data.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    ok(host_local("ADD", "ps-ctr1", &conf(data.path())));
}
