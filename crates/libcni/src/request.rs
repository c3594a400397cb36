//! What the runtime knows about one attachment, and the request each plugin gets.

use crate::error::{Error, Result};
use cni_types::validate::{validate_container_id, validate_interface_name};
use cni_types::{fold, Version};
use serde_json::{Map, Value};
use std::time::Duration;

/// One attachment of a container to a network, as the runtime describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConf {
    pub container_id: String,
    /// Path of the container's network namespace (may be empty for DEL).
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS pairs, in order.
    pub args: Vec<(String, String)>,
    /// Capability arguments (`portMappings`, `ips`, ...); a plugin gets those its
    /// `capabilities` enable, as `runtimeConfig`.
    pub capability_args: Map<String, Value>,
    /// Time limit for the whole operation; the [`crate::CniConfig`]'s when unset.
    pub timeout: Option<Duration>,
}

impl RuntimeConf {
    pub fn new(container_id: impl Into<String>, netns: impl Into<String>, ifname: impl Into<String>) -> Self {
        RuntimeConf {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            ..Default::default()
        }
    }

    /// Adds a CNI_ARGS pair.
    pub fn with_arg(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.args.push((key.into(), value.into()));
        self
    }

    /// Sets a capability argument.
    pub fn with_capability(mut self, key: impl Into<String>, value: Value) -> Self {
        self.capability_args.insert(key.into(), value);
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// CNI_ARGS as plugins receive it: `K=V;K=V`.
    pub fn args_string(&self) -> String {
        self.args.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }

    /// The container ID and interface name name files in the cache: both must be valid.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_container_id(&self.container_id).map_err(Error::InvalidRuntimeConf)?;
        validate_interface_name(&self.ifname).map_err(Error::InvalidRuntimeConf)
    }
}

/// The stdin of ADD, CHECK or DEL for one plugin: the plugin object with the list's
/// `name` and `cniVersion`, `runtimeConfig` from its enabled capabilities, `prevResult`,
/// and `capabilities` removed (as the spec says; Go libcni leaves it in).
pub(crate) fn attachment_request(
    plugin: &Map<String, Value>,
    network: &str,
    version: Version,
    capability_args: &Map<String, Value>,
    prev_result: Option<&Value>,
) -> Vec<u8> {
    let mut conf = plugin.clone();
    set_key(&mut conf, "name", Value::String(network.to_string()));
    set_key(&mut conf, "cniVersion", Value::String(version.to_string()));
    let runtime_config = enabled_capabilities(plugin, capability_args);
    conf.retain(|key, _| !fold::folds_to(key, "capabilities"));
    if !runtime_config.is_empty() {
        set_key(&mut conf, "runtimeConfig", Value::Object(runtime_config));
    }
    if let Some(prev) = prev_result {
        set_key(&mut conf, "prevResult", prev.clone());
    }
    serde_json::to_vec(&conf).expect("a JSON map always serialises")
}

/// The stdin of GC or STATUS: the plugin object as written, with the list's `name` and
/// `cniVersion`, plus `extra` (GC's valid attachments).
pub(crate) fn list_request(
    plugin: &Map<String, Value>,
    network: &str,
    version: Version,
    extra: &[(&str, Value)],
) -> Vec<u8> {
    let mut conf = plugin.clone();
    set_key(&mut conf, "name", Value::String(network.to_string()));
    set_key(&mut conf, "cniVersion", Value::String(version.to_string()));
    for (key, value) in extra {
        set_key(&mut conf, key, value.clone());
    }
    serde_json::to_vec(&conf).expect("a JSON map always serialises")
}

/// Sets `key`, replacing it in any spelling: plugins match keys without regard to case, so
/// an operator's `"Name"` left beside the injected `"name"` would be a second value for the
/// same field (which plugins refuse). The runtime's value is the one that counts, as with
/// Go's libcni (whose injected key sorts after capitalised spellings, and the last wins).
fn set_key(conf: &mut Map<String, Value>, key: &str, value: Value) {
    conf.retain(|existing, _| !fold::folds_to(existing, key));
    conf.insert(key.to_string(), value);
}

/// `runtimeConfig`: each capability the plugin enables that the runtime supplies.
fn enabled_capabilities(
    plugin: &Map<String, Value>,
    capability_args: &Map<String, Value>,
) -> Map<String, Value> {
    let Some(Value::Object(capabilities)) = fold::get(plugin, "capabilities") else {
        return Map::new();
    };
    capabilities
        .iter()
        .filter(|(_, enabled)| enabled.as_bool() == Some(true))
        .filter_map(|(key, _)| capability_args.get(key).map(|v| (key.clone(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn runtime_config_is_capabilities_intersected_with_args_and_capabilities_go() {
        let plugin = object(
            json!({"type": "portmap", "capabilities": {"portMappings": true, "ips": false, "mac": true}, "snat": true}),
        );
        let caps =
            object(json!({"portMappings": [{"hostPort": 8080}], "ips": ["10.0.0.2"], "bandwidth": {}}));
        let req: Value =
            serde_json::from_slice(&attachment_request(&plugin, "net", Version::V1_0_0, &caps, None))
                .unwrap();
        assert_eq!(
            req,
            json!({"type": "portmap", "snat": true, "name": "net", "cniVersion": "1.0.0",
                   "runtimeConfig": {"portMappings": [{"hostPort": 8080}]}})
        );
    }

    #[test]
    fn no_runtime_config_when_nothing_matches_and_prev_result_is_added() {
        let plugin = object(json!({"type": "tuning", "name": "ignored", "cniVersion": "0.1.0"}));
        let prev = json!({"cniVersion": "0.4.0"});
        let req: Value = serde_json::from_slice(&attachment_request(
            &plugin,
            "net",
            Version::V0_4_0,
            &Map::new(),
            Some(&prev),
        ))
        .unwrap();
        assert_eq!(req, json!({"type": "tuning", "name": "net", "cniVersion": "0.4.0", "prevResult": prev}));
    }

    #[test]
    fn keys_in_any_case_are_read_and_replaced_as_plugins_match_them() {
        let plugin = object(
            json!({"Type": "portmap", "Capabilities": {"portMappings": true}, "NAME": "mine", "CNIVersion": "0.1.0"}),
        );
        let caps = object(json!({"portMappings": [{"HostPort": 8080}]}));
        let req: Value =
            serde_json::from_slice(&attachment_request(&plugin, "net", Version::V1_0_0, &caps, None))
                .unwrap();
        assert_eq!(
            req,
            json!({"Type": "portmap", "name": "net", "cniVersion": "1.0.0",
                   "runtimeConfig": {"portMappings": [{"HostPort": 8080}]}})
        );
    }

    #[test]
    fn args_string_is_semicolon_separated() {
        let rt =
            RuntimeConf::new("c", "/n", "eth0").with_arg("IgnoreUnknown", "1").with_arg("IP", "10.0.0.2");
        assert_eq!(rt.args_string(), "IgnoreUnknown=1;IP=10.0.0.2");
        assert_eq!(RuntimeConf::default().args_string(), "");
    }

    #[test]
    fn runtime_conf_validation_guards_cache_paths() {
        assert!(RuntimeConf::new("../x", "/n", "eth0").validate().is_err());
        assert!(RuntimeConf::new("ctr", "/n", "a/b").validate().is_err());
        assert!(RuntimeConf::new("ctr", "/n", "eth0").validate().is_ok());
    }
}
