//! cnitool's reading commands (validate, list, inspect) against files and plugins that
//! play the attacker: a terabyte (sparse) configuration, FIFOs and links to `/dev/zero`
//! where configurations or cache entries belong, a link out of the configuration
//! directory, binary garbage, and plugins that never end, print without end, print too
//! much, or close their output and linger with a grandchild. Each must end with a clear
//! error, within the bounds the code sets (a file's size, the operation's timeout, a
//! plugin's output cap), and leave no process behind.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("sr-cnitool").tempdir().unwrap()
}

fn cnitool(dir: &Path, args: &[&str]) -> Output {
    Command::new(CNITOOL)
        .args(args)
        .env("NETCONFPATH", dir.join("net.d"))
        .env("CNI_PATH", dir.join("bin"))
        .env("CNI_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

const TIB: u64 = 1 << 40;

/// A valid list naming `name` with one plugin of each type.
fn conflist(name: &str, types: &[&str]) -> String {
    let plugins: Vec<Value> = types.iter().map(|t| serde_json::json!({ "type": t })).collect();
    serde_json::json!({ "cniVersion": "1.0.0", "name": name, "plugins": plugins }).to_string()
}

#[test]
fn validate_refuses_fifos_and_devices_without_opening_them() {
    let tmp = tmp();
    let dir = tmp.path().join("net.d");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.conflist");
    mkfifo(&fifo);
    let zero = dir.join("zero.conflist");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for path in [&fifo, &zero] {
        // A read of either would never end (the FIFO has no writer, /dev/zero no end).
        let out = cnitool(tmp.path(), &["validate", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("not a regular file"), "{}", stderr(&out));
    }
    // In the directory they are not configuration files at all (as libcni lists them).
    let out = cnitool(tmp.path(), &["validate", dir.to_str().unwrap()]);
    assert!(stderr(&out).contains("no *.conflist, *.conf or *.json files"), "{}", stderr(&out));
}

#[test]
fn a_huge_configuration_or_one_linked_from_outside_is_refused_at_the_bound() {
    let tmp = tmp();
    let dir = tmp.path().join("net.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("50-srnet.conflist"), conflist("srnet", &["bridge"])).unwrap();
    // A sparse terabyte first in libcni's order: every lookup by name reads it.
    let huge = dir.join("00-huge.conflist");
    sparse(&huge, TIB);
    let out = cnitool(tmp.path(), &["validate", "srnet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let expected = format!("{} is longer than 1048576 bytes", huge.display());
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    // The same through a link out of the directory, and the file itself named.
    std::fs::remove_file(&huge).unwrap();
    let outside = tmp.path().join("outside");
    sparse(&outside, TIB);
    std::os::unix::fs::symlink(&outside, &huge).unwrap();
    let out = cnitool(tmp.path(), &["validate", "srnet"]);
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    let out = cnitool(tmp.path(), &["validate", "--json", huge.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(findings[0]["message"].as_str().unwrap().contains("larger than 1048576"), "{findings}");
}

#[test]
fn binary_garbage_is_a_finding_naming_the_file() {
    let tmp = tmp();
    let dir = tmp.path().join("net.d");
    std::fs::create_dir_all(&dir).unwrap();
    let garbage: Vec<u8> = (0..64u32 << 10).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let file = dir.join("garbage.conflist");
    std::fs::write(&file, &garbage).unwrap();
    let out = cnitool(tmp.path(), &["validate", "--json", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = findings.as_array().unwrap();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["severity"], "error");
    assert_eq!(findings[0]["file"], file.to_str().unwrap());
}

/// Writes plugin `name` into `<dir>/bin` as a shell script.
fn plugin(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The pids listed one a line in `file`.
fn pids(file: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.split_whitespace().map(|p| p.parse().unwrap()).collect()
}

/// Whether `pid` still runs (a zombie not yet reaped by init counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or_default().trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// Waits (bounded) for `pids` to be gone; the ones still running.
fn left_running(pids: &[u32]) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let running: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if running.is_empty() || Instant::now() > until {
            return running;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn validate_ends_every_hostile_plugin_with_a_clear_error_and_leaves_no_process() {
    let tmp = tmp();
    let dir = tmp.path().join("net.d");
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = tmp.path().join("pids");
    let record = format!("echo $$ >> {}", pid_file.display());
    // Never answers, and leaves a grandchild holding its output pipe.
    plugin(
        tmp.path(),
        "sr-slow",
        &format!("{record}\nsleep 600 & echo $! >> {}\nsleep 600", pid_file.display()),
    );
    // Prints without end and never exits.
    plugin(tmp.path(), "sr-endless", &format!("{record}\nexec yes"));
    // Prints 20 MiB, more than a plugin may, and exits as if all were well.
    plugin(tmp.path(), "sr-huge", &format!("{record}\nhead -c 20971520 /dev/zero"));
    // Closes its output at once and lingers.
    plugin(tmp.path(), "sr-closer", &format!("{record}\nexec >&- 2>&-\nsleep 600"));
    let file = dir.join("10-srhostile.conflist");
    std::fs::write(&file, conflist("srhostile", &["sr-slow", "sr-endless", "sr-huge", "sr-closer"])).unwrap();

    let out = cnitool(tmp.path(), &["validate", "--json", "--timeout", "1", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = |plugin: u64| -> String {
        let found = findings.as_array().unwrap().iter().find(|f| f["pluginIndex"] == plugin);
        found.and_then(|f| f["message"].as_str()).unwrap_or_default().to_string()
    };
    for (index, name) in [(0, "sr-slow"), (1, "sr-endless"), (3, "sr-closer")] {
        let expected = format!(
            "plugin {name:?} did not finish VERSION within 1s; it and every process it started were killed"
        );
        assert!(message(index).contains(&expected), "{name}: {findings}");
    }
    assert!(message(2).contains("the result is larger than the 16 MiB a plugin may print"), "{findings}");
    let started = pids(&pid_file);
    assert_eq!(started.len(), 5, "four plugins and a grandchild: {started:?}");
    assert_eq!(left_running(&started), Vec::<u32>::new(), "processes left behind");
}

#[test]
fn list_and_inspect_skip_hostile_cache_files() {
    let tmp = tmp();
    let results = tmp.path().join("cache/results");
    std::fs::create_dir_all(&results).unwrap();
    mkfifo(&results.join("srnet-fifo-eth0"));
    std::os::unix::fs::symlink("/dev/zero", results.join("srnet-zero-eth0")).unwrap();
    sparse(&results.join("srnet-huge-eth0"), TIB);
    std::fs::write(results.join("srnet-garbage-eth0"), [0xffu8, 0, 0x7b, 0x22, 0xc3]).unwrap();
    let out = cnitool(tmp.path(), &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), serde_json::json!([]));
    let out = cnitool(tmp.path(), &["inspect", "fifo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no cached attachment of a container \"fifo\""), "{}", stderr(&out));
}
