//! Shared by the plugin integration tests: the multi-call binary installed into a CNI bin
//! directory, the way an operator installs it.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory holding one link per plugin name (and the Go-compatible names only).
///
/// It lives in cargo's temp dir for integration tests (inside `target/`, never the
/// machine's /tmp) and is named after the binary's size and mtime: every test process of
/// one build shares it, a rebuild gets a new one, and the directories of older builds are
/// removed (their links would otherwise keep every old binary alive on disk).
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let binary = Path::new(env!("CARGO_BIN_EXE_cni-plugins"));
        let meta = std::fs::metadata(binary).expect("the cni-plugins binary is built");
        // Not the inode: the kernel rig's guest sees this file over 9p, with other inode
        // numbers, and must find the directory the host made (its view is read-only).
        let build = format!("{}-{}.{}", meta.size(), meta.mtime(), meta.mtime_nsec());
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cni-plugins-bin");
        let dir = root.join(&build);
        if !dir.join("bridge").exists() {
            // Installed under a private name, then renamed: concurrent test processes never
            // see a half-filled directory, and the loser of the rename race drops its copy.
            let staging = root.join(format!("{build}.staging-{}", std::process::id()));
            let out = std::process::Command::new(binary).arg("install").arg(&staging).output().unwrap();
            assert!(out.status.success(), "install failed: {}", String::from_utf8_lossy(&out.stderr));
            if std::fs::rename(&staging, &dir).is_err() {
                std::fs::remove_dir_all(&staging).unwrap();
            }
        }
        for entry in std::fs::read_dir(&root).unwrap().flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&build) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        dir
    })
}

/// The path a runtime would run for plugin `name`.
pub fn plugin(name: &str) -> PathBuf {
    let p = plugin_dir().join(name);
    assert!(p.exists(), "plugin {name} is not installed");
    p
}

use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::Value;

/// Runs plugin `name` for `command` the way a runtime on the test's host would: the process
/// inside `host`, CNI_NETNS pointing at `container`.
pub fn call(
    name: &str,
    command: &str,
    host: &TestNetns,
    container: Option<&TestNetns>,
    conf: &Value,
) -> PluginCall {
    let mut call = PluginCall::new(plugin(name), command)
        .in_namespace(host.path())
        .cni_path(&plugin_dir().display().to_string())
        .config(conf);
    if let Some(c) = container {
        call = call.netns(c.path()).container_id(c.name());
    }
    call
}

/// ADD that must succeed; returns the result JSON.
pub fn add(name: &str, host: &TestNetns, container: &TestNetns, conf: &Value) -> Value {
    call(name, "ADD", host, Some(container), conf).run().json()
}

/// Runs a call and requires success.
pub fn ok(out: PluginOutput) {
    assert!(out.success(), "plugin failed ({}): {}\nstderr: {}", out.status, out.stdout, out.stderr);
}

pub use cni_testkit::poll::EVENTUALLY;

/// Waits (up to [`EVENTUALLY`]) until `done` holds, failing with `what` otherwise. DEL
/// hands the deletion of a veth pair to a background process, so the pair disappears
/// shortly after DEL returns.
pub fn eventually(what: &str, done: impl FnMut() -> bool) {
    cni_testkit::poll::until(what, EVENTUALLY, done)
}

/// Waits (up to [`EVENTUALLY`]) until no link named `name` exists in `ns`.
pub fn wait_link_gone(ns: &TestNetns, name: &str) {
    let mut netlink = ns.netlink().unwrap();
    eventually(&format!("{name} still exists in {}", ns.name()), || {
        netlink.link_by_name(name).unwrap().is_none()
    });
}
