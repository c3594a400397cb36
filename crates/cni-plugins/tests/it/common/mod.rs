//! Shared by the plugin integration tests: the multi-call binary installed into a CNI bin
//! directory, the way an operator installs it.

pub mod hostile_router;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory holding one link per plugin name (and the Go-compatible names only), in
/// cargo's temp dir for integration tests, shared by every test process of one build
/// ([`cni_testkit::binaries::installed_plugins`]).
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        cni_testkit::binaries::installed_plugins(
            Path::new(env!("CARGO_BIN_EXE_cni-plugins")),
            Path::new(env!("CARGO_TARGET_TMPDIR")),
        )
    })
}

/// The path a runtime would run for plugin `name`. `dhcp` is a binary of its own (crate
/// cni-dhcp), built (or found up to date) by cargo for the tests that run it.
pub fn plugin(name: &str) -> PathBuf {
    if name == "dhcp" {
        return cni_testkit::binaries::fresh_workspace_binary("cni-dhcp", "dhcp");
    }
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
    PluginCall::from_host(plugin(name), command, plugin_dir(), host, container).config(conf)
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

/// Waits until no link named `name` exists in `ns` (see [`TestNetns::wait_link_gone`]).
pub fn wait_link_gone(ns: &TestNetns, name: &str) {
    ns.wait_link_gone(name)
}
