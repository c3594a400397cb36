//! Shared rig for libcni's integration tests: a temp dir with plugin wrappers around the
//! scriptable test plugin, a cache dir, and the invocation log they all append to.

use cni_testkit::binaries::test_plugin;
use cni_testkit::test_plugin::{read_log, Behaviour, Invocation};
use libcni::{CniConfig, NetworkConfigList};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub cache: PathBuf,
    pub log: PathBuf,
    pub cni: CniConfig,
}

impl Rig {
    pub fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let cache = dir.path().join("cache");
        std::fs::create_dir(&bin).unwrap();
        let log = dir.path().join("invocations.log");
        let cni = CniConfig::new([bin.clone()]).with_cache_dir(&cache);
        Rig { dir, bin, cache, log, cni }
    }

    /// Installs plugin `name`: the test plugin, logging to the rig's log. Its behaviour
    /// comes from the config's `testBehaviour` (or `versions` for VERSION).
    pub fn plugin(&self, name: &str) -> &Rig {
        self.plugin_claiming(name, None)
    }

    /// Installs plugin `name` that answers VERSION with `versions`.
    pub fn plugin_claiming(&self, name: &str, versions: Option<&[&str]>) -> &Rig {
        let mut script = format!("#!/bin/sh\nexport CNI_TEST_LOG='{}'\n", self.log.display());
        if let Some(versions) = versions {
            let file = self.dir.path().join(format!("{name}.behaviour.json"));
            Behaviour {
                supported_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
                ..Default::default()
            }
            .write_to(&file)
            .unwrap();
            script.push_str(&format!("export CNI_TEST_BEHAVIOUR='{}'\n", file.display()));
        }
        script.push_str(&format!("exec '{}' \"$@\"\n", test_plugin().display()));
        self.script(name, &script);
        self
    }

    /// Installs an arbitrary executable script as plugin `name`.
    pub fn script(&self, name: &str, text: &str) -> PathBuf {
        let path = self.bin.join(name);
        let temp = self.bin.join(format!(".{name}.tmp"));
        std::fs::write(&temp, text).unwrap();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&temp, &path).unwrap();
        path
    }

    pub fn list(&self, value: Value) -> NetworkConfigList {
        NetworkConfigList::from_bytes(&serde_json::to_vec(&value).unwrap()).unwrap()
    }

    pub fn log(&self) -> Vec<Invocation> {
        read_log(&self.log)
    }

    pub fn clear_log(&self) {
        let _ = std::fs::remove_file(&self.log);
    }

    /// (command, plugin type) of each logged invocation, in order.
    pub fn calls(&self) -> Vec<(String, String)> {
        self.log()
            .iter()
            .map(|i| {
                (i.command.clone(), i.stdin.get("type").and_then(Value::as_str).unwrap_or("").to_string())
            })
            .collect()
    }

    pub fn cache_file(&self, network: &str, container: &str, ifname: &str) -> PathBuf {
        libcni::cache::cache_path(&self.cache, network, container, ifname)
    }
}

pub fn calls(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// The CNI_* variables a plugin saw, minus the rig's own CNI_TEST_* ones.
pub fn cni_var_names(inv: &Invocation) -> Vec<&str> {
    inv.env
        .keys()
        .map(String::as_str)
        .filter(|k| k.starts_with("CNI_") && !k.starts_with("CNI_TEST_"))
        .collect()
}
