//! A Kurma configuration's `container_networks`, loaded and checked as a whole before
//! anything is started.

use std::collections::HashSet;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{EntryRef, Error, Result};
use crate::source::ImageSource;
use crate::template::InterfaceTemplate;

/// One network: the parts the host side reads, plus the whole entry, which is what the
/// netplugin gets on stdin.
#[derive(Debug, Clone)]
pub struct NetworkEntry {
    pub name: String,
    pub image: ImageSource,
    /// `None` when `containerInterface` is omitted (e.g. loopback): `add`/`del` then get
    /// no interface argument.
    pub interface: Option<InterfaceTemplate>,
    /// The entry exactly as configured.
    pub raw: Map<String, Value>,
}

/// The checked list of networks, in configuration order.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub networks: Vec<NetworkEntry>,
}

impl NetworkConfig {
    /// Reads the Kurma configuration file at `path`.
    pub fn load(path: &Path) -> Result<NetworkConfig> {
        let text = std::fs::read(path).map_err(Error::io(path))?;
        let value: Value = serde_json::from_slice(&text)
            .map_err(|err| Error::Config(format!("{}: not JSON: {err}", path.display())))?;
        NetworkConfig::from_value(&value)
    }

    /// Checks a parsed Kurma configuration: every entry has a `name` and an `aci` with a
    /// known URI scheme, names are unique, interface templates are well formed.
    pub fn from_value(config: &Value) -> Result<NetworkConfig> {
        let list = config
            .get("container_networks")
            .ok_or_else(|| Error::Config("the configuration has no \"container_networks\" list".into()))?
            .as_array()
            .ok_or_else(|| Error::Config("\"container_networks\" must be a list".into()))?;
        let mut names = HashSet::new();
        let mut networks = Vec::with_capacity(list.len());
        for (index, value) in list.iter().enumerate() {
            let entry = parse_entry(index, value)?;
            if !names.insert(entry.name.clone()) {
                return Err(Error::Entry {
                    entry: EntryRef { index, name: Some(entry.name) },
                    message: "duplicate network name: \"name\" must be unique".into(),
                });
            }
            networks.push(entry);
        }
        Ok(NetworkConfig { networks })
    }

    /// The network called `name`.
    pub fn network(&self, name: &str) -> Option<&NetworkEntry> {
        self.networks.iter().find(|n| n.name == name)
    }
}

fn parse_entry(index: usize, value: &Value) -> Result<NetworkEntry> {
    let name = value.get("name").and_then(Value::as_str).map(str::to_string);
    let fail = |message: String| Error::Entry { entry: EntryRef { index, name: name.clone() }, message };
    let raw = value.as_object().ok_or_else(|| fail("must be a JSON object".into()))?.clone();
    let name = match raw.get("name") {
        None => return Err(fail("\"name\" is missing".into())),
        Some(Value::String(s)) if s.is_empty() => return Err(fail("\"name\" is empty".into())),
        Some(Value::String(s)) if !is_safe_name(s) => {
            return Err(fail("\"name\" may hold only letters, digits, '-', '_' and '.'".into()))
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(fail("\"name\" must be a string".into())),
    };
    let aci = match raw.get("aci") {
        None => return Err(fail("\"aci\" is missing".into())),
        Some(Value::String(s)) => s,
        Some(_) => return Err(fail("\"aci\" must be a string".into())),
    };
    let image = ImageSource::parse(aci).map_err(|why| fail(format!("\"aci\": {why}")))?;
    let interface = match raw.get("containerInterface") {
        None => None,
        Some(Value::String(s)) => {
            Some(InterfaceTemplate::parse(s).map_err(|why| fail(format!("\"containerInterface\": {why}")))?)
        }
        Some(_) => return Err(fail("\"containerInterface\" must be a string".into())),
    };
    Ok(NetworkEntry { name, image, interface, raw })
}

/// Names become file and container names: keep them to a portable set.
fn is_safe_name(name: &str) -> bool {
    name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(networks: Value) -> String {
        NetworkConfig::from_value(&json!({ "container_networks": networks })).unwrap_err().to_string()
    }

    #[test]
    fn the_seed_example_loads() {
        let config = NetworkConfig::from_value(&json!({"container_networks": [
            {"name": "lo", "aci": "file:///images/lo.aci"},
            {"name": "mynet", "aci": "docker:///kurma/cni-netplugin:1", "containerInterface": "eth0",
             "type": "bridge", "bridge": "mynet0", "ipam": {"type": "host-local"}},
        ]}))
        .unwrap();
        assert_eq!(config.networks.len(), 2);
        assert!(config.networks[0].interface.is_none());
        assert_eq!(config.networks[1].raw["bridge"], "mynet0");
    }

    #[test]
    fn each_bad_entry_is_named() {
        let err = error_of(json!([{"aci": "file:///a"}]));
        assert_eq!(err, "container_networks[0]: \"name\" is missing");
        let err = error_of(json!([{"name": "a", "aci": "file:///a"}, {"name": "b"}]));
        assert_eq!(err, "container_networks[1] (\"b\"): \"aci\" is missing");
        let err = error_of(json!([{"name": "a", "aci": "file:///a"}, {"name": "a", "aci": "file:///b"}]));
        assert!(err.starts_with("container_networks[1] (\"a\"): duplicate network name"), "{err}");
        let err = error_of(json!([{"name": "a", "aci": "ftp://x/y"}]));
        assert!(
            err.starts_with("container_networks[0] (\"a\"): \"aci\": unknown URI scheme \"ftp\""),
            "{err}"
        );
        let err = error_of(json!([{"name": "a", "aci": "file:///a", "containerInterface": "eth{x}"}]));
        assert!(err.contains("\"containerInterface\""), "{err}");
        let err = error_of(json!([{"name": "../x", "aci": "file:///a"}]));
        assert!(err.contains("\"name\" may hold only"), "{err}");
        let err = error_of(json!(["x"]));
        assert_eq!(err, "container_networks[0]: must be a JSON object");
    }
}
