//! Operations on a whole network rather than one attachment: GC, STATUS, VERSION of a
//! plugin and validation of a list.

use crate::cache;
use crate::config::{NetworkConfig, NetworkConfigList};
use crate::error::{Error, Result};
use crate::request::{list_request, RuntimeConf};
use crate::runtime::CniConfig;
use cni_types::Attachment;
use cni_types::{Version, VersionInfo};
use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

impl CniConfig {
    /// Garbage-collects a network: first DEL (with the list given) for every cached
    /// attachment of this network that is not in `valid`, then, from 1.1.0 on, GC to every
    /// plugin with `cni.dev/valid-attachments`. Failures do not stop the rest; they are
    /// returned together. Nothing happens when the list sets `disableGC`. Each stale DEL,
    /// and the GC round, gets the configured time limit. Temporary cache files no writer
    /// holds (a runtime killed mid-write) are removed first.
    pub fn gc_network_list(&self, list: &NetworkConfigList, valid: &[Attachment]) -> Result<()> {
        if list.list.disable_gc {
            return Ok(());
        }
        let mut errors = Vec::new();
        // Left by a runtime killed mid-write; not tied to any network, so any list's GC
        // sweeps them.
        if let Err(e) = cache::remove_abandoned_temp_files(self.cache_dir(), std::time::SystemTime::now()) {
            errors.push(e);
        }
        let keep: HashSet<&Attachment> = valid.iter().collect();
        for stale in cache::list(self.cache_dir())?.into_iter().filter(|a| a.network == list.name()) {
            let id = Attachment::new(stale.container_id.clone(), stale.ifname.clone());
            if keep.contains(&id) {
                continue;
            }
            let rt = RuntimeConf {
                container_id: stale.container_id,
                netns: stale.netns,
                ifname: stale.ifname,
                args: stale.cni_args,
                capability_args: stale.capability_args,
                timeout: None,
            };
            if let Err(e) = self.del_network_list(list, &rt) {
                errors.push(e);
            }
        }
        if list.version.supports_gc_and_status() {
            let attachments = serde_json::to_value(valid).expect("attachments serialise");
            let extra =
                [("cni.dev/valid-attachments", attachments.clone()), ("cni.dev/attachments", attachments)];
            let op = self.operation(list, None);
            for (index, plugin) in list.plugins().iter().enumerate() {
                let stdin = list_request(plugin, list.name(), list.version, &extra);
                if let Err(e) = op.run(index, "GC", self.list_env("GC"), &stdin) {
                    errors.push(e);
                }
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Multiple(errors)),
        }
    }

    /// Asks every plugin whether it is ready for ADDs; the first failure is returned.
    /// Does nothing below 1.1.0 (STATUS does not exist there).
    pub fn status_network_list(&self, list: &NetworkConfigList) -> Result<()> {
        if !list.version.supports_gc_and_status() {
            return Ok(());
        }
        let op = self.operation(list, None);
        for (index, plugin) in list.plugins().iter().enumerate() {
            let stdin = list_request(plugin, list.name(), list.version, &[]);
            op.run(index, "STATUS", self.list_env("STATUS"), &stdin)?;
        }
        Ok(())
    }

    /// GC of a single-plugin configuration.
    pub fn gc_network(&self, conf: &NetworkConfig, valid: &[Attachment]) -> Result<()> {
        self.gc_network_list(&conf.as_list(), valid)
    }

    /// STATUS of a single-plugin configuration.
    pub fn status_network(&self, conf: &NetworkConfig) -> Result<()> {
        self.status_network_list(&conf.as_list())
    }

    /// Asks plugin `plugin_type` which versions it speaks (VERSION). A plugin too old to
    /// know VERSION is taken to speak 0.1.0.
    pub fn get_version_info(&self, plugin_type: &str) -> Result<VersionInfo> {
        let binary = self.find_plugin(plugin_type)?;
        // The dummy values keep plugins built on old SDKs, which require them, happy.
        let env = self.with_trace_env(vec![
            ("CNI_COMMAND", "VERSION".to_string()),
            ("CNI_NETNS", "dummy".to_string()),
            ("CNI_IFNAME", "dummy".to_string()),
            ("CNI_PATH", "dummy".to_string()),
        ]);
        let stdin = format!(r#"{{"cniVersion":"{}"}}"#, Version::LATEST);
        let run = crate::exec::PluginRun {
            plugin_type,
            binary: &binary,
            command: "VERSION",
            env,
            stdin: stdin.as_bytes(),
            deadline: Instant::now() + self.timeout(),
            timeout: self.timeout(),
        };
        let stdout = match run.run() {
            Err(Error::Plugin { error, .. }) if error.msg == "unknown CNI_COMMAND: VERSION" => {
                return Ok(VersionInfo {
                    cni_version: "0.1.0".into(),
                    supported_versions: vec!["0.1.0".into()],
                });
            }
            other => other?,
        };
        decode_version_info(plugin_type, &stdout)
    }

    /// Checks that every plugin of the list exists and supports the list's version (by
    /// asking each with VERSION). Returns the union of the capabilities the plugins enable.
    pub fn validate_network_list(&self, list: &NetworkConfigList) -> Result<Vec<String>> {
        let mut errors = Vec::new();
        let mut capabilities = BTreeSet::new();
        for (index, plugin) in list.plugins().iter().enumerate() {
            let plugin_type = list.plugin_type(index);
            match self.get_version_info(plugin_type) {
                Ok(info) if info.supports(list.version.as_str()) => {}
                Ok(info) => errors.push(Error::PluginVersionUnsupported {
                    plugin_type: plugin_type.to_string(),
                    version: list.version.to_string(),
                    supported: info.supported_versions,
                }),
                Err(e) => errors.push(e),
            }
            if let Some(serde_json::Value::Object(caps)) = cni_types::fold::get(plugin, "capabilities") {
                capabilities
                    .extend(caps.iter().filter(|(_, on)| on.as_bool() == Some(true)).map(|(k, _)| k.clone()));
            }
        }
        match errors.len() {
            0 => Ok(capabilities.into_iter().collect()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Multiple(errors)),
        }
    }

    fn list_env(&self, command: &str) -> Vec<(&'static str, String)> {
        self.with_trace_env(vec![("CNI_COMMAND", command.to_string()), ("CNI_PATH", self.path_env())])
    }
}

fn decode_version_info(plugin_type: &str, stdout: &[u8]) -> Result<VersionInfo> {
    let decode_error = |reason: String| Error::Decode {
        plugin_type: plugin_type.to_string(),
        command: "VERSION".into(),
        reason,
        output: String::from_utf8_lossy(stdout).chars().take(512).collect(),
    };
    let mut info: VersionInfo = serde_json::from_slice(stdout).map_err(|e| decode_error(e.to_string()))?;
    if info.cni_version.is_empty() {
        return Err(decode_error("missing cniVersion".into()));
    }
    if info.supported_versions.is_empty() {
        // 0.2.0-era plugins answered without the list.
        if info.cni_version == "0.2.0" {
            info.supported_versions = vec!["0.1.0".into(), "0.2.0".into()];
        } else {
            return Err(decode_error("missing supportedVersions".into()));
        }
    }
    Ok(info)
}
