//! Shared by the plugin integration tests: the multi-call binary installed into a temp
//! CNI bin directory, once per test binary, the way an operator installs it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory holding one link per plugin name (and the Go-compatible names only).
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("cni-plugins-bin").tempdir().unwrap().keep();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cni-plugins"))
            .arg("install")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "install failed: {}", String::from_utf8_lossy(&out.stderr));
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
