//! The plugin directory the dhcp tests run from: the multi-call `cni-plugins` (bridge,
//! macvlan, ...) installed as an operator installs it, with this crate's `dhcp` binary
//! beside its links, and calls of those plugins as a runtime makes them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use serde_json::Value;

/// The directory, in cargo's temp dir, shared by every test process of one build
/// ([`cni_testkit::binaries::installed_plugins_with`]). `cni-plugins` is another
/// package's binary: built (or found up to date) by cargo first.
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let multi_call = cni_testkit::binaries::fresh_workspace_binary("cni-plugins", "cni-plugins");
        cni_testkit::binaries::installed_plugins_with(
            &multi_call,
            &[Path::new(env!("CARGO_BIN_EXE_dhcp"))],
            Path::new(env!("CARGO_TARGET_TMPDIR")),
        )
    })
}

/// The path a runtime would run for plugin `name`.
pub fn plugin(name: &str) -> PathBuf {
    let p = plugin_dir().join(name);
    assert!(p.exists(), "plugin {name} is not installed");
    p
}

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

/// Waits until no link named `name` exists in `ns` (see [`TestNetns::wait_link_gone`]).
pub fn wait_link_gone(ns: &TestNetns, name: &str) {
    ns.wait_link_gone(name)
}
