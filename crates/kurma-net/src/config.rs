//! A Kurma configuration's `container_networks`, loaded and checked as a whole before
//! anything is started.

use std::path::Path;

use kurma_model::network::{self as model, ModelError};
use serde_json::Value;

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
    /// The entry as the shared model reads it (`aci`, the raw entry the netplugin gets
    /// on stdin, ...).
    pub entry: model::NetworkEntry,
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

    /// Checks a parsed Kurma configuration: every entry has a `name` and an `aci`, names
    /// are unique ([`kurma_model::network`], the model the netplugins read too); then
    /// what the host needs on top: names usable as file names, a known URI scheme, well
    /// formed interface templates.
    pub fn from_value(config: &Value) -> Result<NetworkConfig> {
        let entries = model::parse_container_networks(config).map_err(|err| match err {
            ModelError::Entry { index, name, reason, .. } => {
                Error::Entry { entry: EntryRef { index, name }, message: reason }
            }
            other => Error::Config(other.to_string()),
        })?;
        let networks = entries.into_iter().enumerate().map(|(index, entry)| host_entry(index, entry));
        Ok(NetworkConfig { networks: networks.collect::<Result<_>>()? })
    }

    /// The network called `name`.
    pub fn network(&self, name: &str) -> Option<&NetworkEntry> {
        self.networks.iter().find(|n| n.name == name)
    }
}

fn host_entry(index: usize, entry: model::NetworkEntry) -> Result<NetworkEntry> {
    let fail =
        |message: String| Error::Entry { entry: EntryRef { index, name: Some(entry.name.clone()) }, message };
    if !is_safe_name(&entry.name) {
        return Err(fail("\"name\" may hold only letters, digits, '-', '_' and '.'".into()));
    }
    let image = ImageSource::parse(&entry.aci).map_err(|why| fail(format!("\"aci\": {why}")))?;
    let interface = match &entry.container_interface {
        None => None,
        Some(text) => Some(
            InterfaceTemplate::parse(text).map_err(|why| fail(format!("\"containerInterface\": {why}")))?,
        ),
    };
    Ok(NetworkEntry { name: entry.name.clone(), image, interface, entry })
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
        assert_eq!(config.networks[1].entry.raw["bridge"], "mynet0");
    }

    #[test]
    fn each_bad_entry_is_named() {
        let err = error_of(json!([{"aci": "file:///a"}]));
        assert_eq!(err, "container_networks[0]: \"name\" is missing");
        let err = error_of(json!([{"name": "a", "aci": "file:///a"}, {"name": "b"}]));
        assert_eq!(err, "container_networks[1] (\"b\"): \"aci\" is missing");
        let err = error_of(json!([{"name": "a", "aci": "file:///a"}, {"name": "a", "aci": "file:///b"}]));
        assert_eq!(err, "container_networks[1] (\"a\"): the name is already used by container_networks[0]");
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
        assert_eq!(err, "container_networks[0]: an entry must be a JSON object");
    }
}
