//! The plugin directory under test.
//!
//! `CNI_E2E_PLUGIN_DIR` names it (e.g. `/usr/lib/cni` for the Go reference plugins). Without
//! it, this workspace's multi-call `cni-plugins` binary is installed (as links named after
//! each plugin) into a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use cni_testkit::binaries::workspace_binary;
use tempfile::TempDir;

use crate::process::stdout_of_success;

/// The variable that points the suite at a plugin directory.
pub const PLUGIN_DIR_VAR: &str = "CNI_E2E_PLUGIN_DIR";

/// A directory of CNI plugin executables (removed on drop if the suite made it).
#[derive(Debug)]
pub struct PluginDir {
    path: PathBuf,
    label: String,
    _installed: Option<TempDir>,
}

impl PluginDir {
    /// The directory `CNI_E2E_PLUGIN_DIR` names, or ours installed into a temp dir.
    pub fn from_env() -> PluginDir {
        match std::env::var_os(PLUGIN_DIR_VAR) {
            Some(dir) if !dir.is_empty() => {
                let path = PathBuf::from(dir);
                assert!(path.is_dir(), "{PLUGIN_DIR_VAR}={} is not a directory", path.display());
                let label = path.display().to_string();
                PluginDir { path, label, _installed: None }
            }
            _ => PluginDir::install_ours(),
        }
    }

    /// An existing directory, labelled `label` in log lines (cni-bench's plugin sets).
    pub fn at(path: &Path, label: &str) -> PluginDir {
        assert!(path.is_dir(), "plugin directory {} is not a directory", path.display());
        PluginDir { path: path.to_path_buf(), label: label.to_string(), _installed: None }
    }

    /// The plugins of `dir` in a temporary directory of the suite's own (hard links, or
    /// copies across file systems), labelled `label`: an [`EngineHost`] hides the default
    /// plugin directories (`/usr/lib/cni`, the Go plugins' among them), so a set swapped in
    /// while engines run must live elsewhere ([`EngineHost::replace_plugin_dir`]).
    ///
    /// [`EngineHost`]: crate::engine_host::EngineHost
    /// [`EngineHost::replace_plugin_dir`]: crate::engine_host::EngineHost::replace_plugin_dir
    pub fn linked_from(dir: &Path, label: &str) -> PluginDir {
        let linked = tempfile::Builder::new().prefix("cne-plugins-").tempdir().expect("temp plugin dir");
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries.map(|e| e.expect("read a plugin directory entry")) {
            let (from, to) = (entry.path(), linked.path().join(entry.file_name()));
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
            }
        }
        PluginDir { path: linked.path().to_path_buf(), label: label.to_string(), _installed: Some(linked) }
    }

    /// This workspace's plugins, installed into a temporary directory (labelled "ours") as
    /// the package installs them: a link per plugin, and `etcd-ipam` and `dhcp` (binaries
    /// of their own) and `cni-dnsd` beside them. podman's
    /// `network create` adds `dnsname` to every network when the directory has it, and
    /// dnsname starts the resolver from next to itself.
    pub fn install_ours() -> PluginDir {
        let binary = workspace_binary("cni-plugins", "cni-plugins");
        let dir = tempfile::Builder::new().prefix("cne-plugins-").tempdir().expect("temp plugin dir");
        stdout_of_success(Command::new(&binary).arg("install").arg(dir.path()), "cni-plugins install");
        for (package, bin) in [("cni-etcd-ipam", "etcd-ipam"), ("cni-dhcp", "dhcp"), ("cni-dnsd", "cni-dnsd")]
        {
            let binary = workspace_binary(package, bin);
            std::fs::copy(&binary, dir.path().join(bin))
                .unwrap_or_else(|e| panic!("copy {bin} beside the plugins: {e}"));
        }
        PluginDir { path: dir.path().to_path_buf(), label: "ours".into(), _installed: Some(dir) }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// "ours" or the directory given, for log lines comparing runs.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Panics, naming every missing one, unless all of `plugins` are in the directory — a
    /// clearer failure than the engine's "failed to find plugin" deep inside a test.
    pub fn require(&self, plugins: &[&str]) {
        let missing: Vec<&str> = plugins.iter().copied().filter(|p| !self.path.join(p).is_file()).collect();
        assert!(
            missing.is_empty(),
            "plugin directory {} ({}) lacks plugins the engine's chain needs: {missing:?}",
            self.path.display(),
            self.label
        );
    }
}
