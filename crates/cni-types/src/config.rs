//! Network configurations: the list a runtime loads and the per-plugin object it sends.
//!
//! Unknown keys are kept (in `extra`, in their original order) so that a configuration
//! passes through the runtime unaltered in meaning, as the spec requires. Deserialised
//! through [`crate::fold::deserialize`], the known keys match without regard to case, as the
//! reference's do; [`with_extra`](crate::fold::with_extra) is what lets them keep the unknown
//! keys and still show their field names to it.

use crate::fold;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// DNS settings, in a configuration or a result. Empty fields are omitted on output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// The `ipam` section: its `type` plus whatever the IPAM plugin reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct IpamConf {
    #[serde(rename = "type", default)]
    pub ipam_type: String,
    #[serde(flatten, skip_deserializing)]
    pub extra: Map<String, Value>,
}

/// One plugin's configuration, as a plugin receives it on stdin.
///
/// (`remote = "Self"`: the derived code becomes inherent functions, which the trait impls
/// below call; deserialising goes through [`fold::with_extra`] to fill `extra`.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct NetConf {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<BTreeMap<String, bool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<IpamConf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(rename = "runtimeConfig", default, skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<Map<String, Value>>,
    #[serde(rename = "prevResult", default, skip_serializing_if = "Option::is_none")]
    pub prev_result: Option<Value>,
    #[serde(flatten, skip_deserializing)]
    pub extra: Map<String, Value>,
}

impl NetConf {
    /// `args.cni`: the runtime's per-attachment arguments inside the configuration.
    pub fn args_cni(&self) -> Option<&Map<String, Value>> {
        fold::get(self.args.as_ref()?.as_object()?, "cni")?.as_object()
    }

    /// A key of `runtimeConfig` (a capability), matched as the reference matches it.
    pub fn runtime_config(&self, key: &str) -> Option<&Value> {
        fold::get(self.runtime_config.as_ref()?, key)
    }
}

crate::keeps_unknown_keys!(NetConf);
crate::keeps_unknown_keys!(IpamConf);

/// A network configuration list (a `.conflist` file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetConfList {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(rename = "cniVersions", default, skip_serializing_if = "Vec::is_empty")]
    pub cni_versions: Vec<String>,
    #[serde(default)]
    pub name: String,
    #[serde(
        rename = "disableCheck",
        default,
        deserialize_with = "bool_or_string",
        skip_serializing_if = "is_false"
    )]
    pub disable_check: bool,
    #[serde(
        rename = "disableGC",
        default,
        deserialize_with = "bool_or_string",
        skip_serializing_if = "is_false"
    )]
    pub disable_gc: bool,
    #[serde(
        rename = "loadOnlyInlinedPlugins",
        default,
        deserialize_with = "bool_or_string",
        skip_serializing_if = "is_false"
    )]
    pub load_only_inlined_plugins: bool,
    /// Each plugin object exactly as written, so unknown keys pass through.
    #[serde(default)]
    pub plugins: Vec<Map<String, Value>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NetConfList {
    /// Upconverts a single-plugin configuration (a `.conf` file) into a list of one, as
    /// runtimes do for the older file format.
    pub fn from_plugin_conf(conf: Map<String, Value>) -> NetConfList {
        let text = |k: &str| conf.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        NetConfList {
            cni_version: text("cniVersion"),
            name: text("name"),
            plugins: vec![conf],
            ..Default::default()
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Booleans in a list may be JSON booleans or the strings "true"/"false" (any case).
fn bool_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match Value::deserialize(d)? {
        Value::Bool(b) => Ok(b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => {
            Err(serde::de::Error::custom(format!("expected a boolean or \"true\"/\"false\", got {other}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_booleans_accept_strings() {
        let l: NetConfList = serde_json::from_str(
            r#"{"cniVersion":"1.1.0","name":"n","disableCheck":"TRUE","disableGC":false,"loadOnlyInlinedPlugins":"false","plugins":[]}"#,
        )
        .unwrap();
        assert!(l.disable_check);
        assert!(!l.disable_gc);
        assert!(!l.load_only_inlined_plugins);
        let bad = serde_json::from_str::<NetConfList>(r#"{"name":"n","disableCheck":"yes","plugins":[]}"#);
        assert!(bad.unwrap_err().to_string().contains("boolean"));
    }

    #[test]
    fn unknown_keys_survive_a_round_trip() {
        let text = r#"{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"cni0","keyA":["x",{"y":1}],"ipam":{"type":"host-local","subnet":"10.1.0.0/16"}}"#;
        let c: NetConf = serde_json::from_str(text).unwrap();
        assert_eq!(c.plugin_type, "bridge");
        assert_eq!(c.extra["bridge"], "cni0");
        assert_eq!(c.ipam.as_ref().unwrap().extra["subnet"], "10.1.0.0/16");
        let back: Value = serde_json::to_value(&c).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(text).unwrap());
    }

    /// Found by the `config` fuzz target: without serde_json's `float_roundtrip` a number
    /// read back from its own printing could differ in the last digit, so a plugin's float
    /// setting changed on its way through libcni.
    #[test]
    fn a_float_setting_survives_a_round_trip_exactly() {
        let text = r#"{"cniVersion":"1.1.0","name":"n","type":"portmap","rt":{"ips":[{"interface":6.666666666666665e+49}]}}"#;
        let c: NetConf = serde_json::from_str(text).unwrap();
        let back: NetConf = serde_json::from_slice(&serde_json::to_vec(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.extra["rt"]["ips"][0]["interface"].as_f64(), Some(6.666666666666665e49));
    }

    #[test]
    fn args_cni_and_runtime_config() {
        let c: NetConf = serde_json::from_str(
            r#"{"name":"n","type":"t","args":{"cni":{"ips":["10.0.0.2"]}},"runtimeConfig":{"mac":"c2:11:22:33:44:55"}}"#,
        )
        .unwrap();
        assert_eq!(c.args_cni().unwrap()["ips"][0], "10.0.0.2");
        assert_eq!(c.runtime_config("mac").unwrap(), "c2:11:22:33:44:55");
    }

    #[test]
    fn single_conf_upconverts() {
        let conf: Map<String, Value> =
            serde_json::from_str(r#"{"cniVersion":"0.4.0","name":"one","type":"bridge"}"#).unwrap();
        let l = NetConfList::from_plugin_conf(conf);
        assert_eq!((l.name.as_str(), l.cni_version.as_str(), l.plugins.len()), ("one", "0.4.0", 1));
    }
}
