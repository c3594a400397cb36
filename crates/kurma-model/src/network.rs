//! The Kurma network data model, shared by the netplugin executables (image side) and the
//! host daemon that runs them.
//!
//! - [`NetworkEntry`]: one entry of a Kurma configuration's `container_networks`: `name`,
//!   `aci`, `containerInterface` and the plugin's own keys (`type`, `bridge`, `ipam`, ...),
//!   kept in order and unchanged.
//! - [`parse_container_networks`]: the whole list out of a Kurma configuration, with
//!   errors that name the entry (index and, when known, name).
//! - [`KurmaResult`]: what `add` prints, the `ip4` / `ip6` form of the Kurma
//!   specification, and its conversion from a CNI result of any version.

use cni_types::{CniResult, Dns, Version};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// The keys of an entry that are Kurma's own; every other key belongs to the plugin.
pub const KURMA_KEYS: [&str; 2] = ["aci", "containerInterface"];

/// One network of `container_networks`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkEntry {
    /// The network's unique name (containers name the networks they attach to).
    pub name: String,
    /// Where the plugin image is: `file://`, `http(s)://` or `docker://` URI.
    pub aci: String,
    /// The interface to configure in the container, possibly a template the host renders.
    pub container_interface: Option<String>,
    /// The CNI plugin the image runs (`type`); absent for images with one default plugin.
    pub plugin_type: Option<String>,
    /// The entry as written, every key included (what the executables get on stdin).
    pub raw: Map<String, Value>,
}

/// A `container_networks` entry (or the list) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("the configuration is not valid JSON: {0}")]
    Json(String),
    #[error("the configuration has no \"container_networks\" list")]
    NoNetworks,
    #[error("container_networks[{index}]{}: {reason}", name_suffix(.name))]
    Entry { index: usize, name: Option<String>, field: String, reason: String },
}

fn name_suffix(name: &Option<String>) -> String {
    name.as_ref().map(|n| format!(" ({n:?})")).unwrap_or_default()
}

impl ModelError {
    /// The field the error is about (`name`, `aci`, ...), when it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ModelError::Entry { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl NetworkEntry {
    /// Reads entry `index` of `container_networks` (the index only labels errors).
    pub fn from_value(index: usize, value: &Value) -> Result<NetworkEntry, ModelError> {
        let Value::Object(raw) = value else {
            return Err(entry_error(index, None, "", "an entry must be a JSON object"));
        };
        let name = raw.get("name").and_then(Value::as_str).map(str::to_string);
        let fail = |field: &str, reason: &str| entry_error(index, name.clone(), field, reason);
        let required = |field: &str| match raw.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(fail(field, &format!("\"{field}\" must not be empty"))),
            Some(_) => Err(fail(field, &format!("\"{field}\" must be a string"))),
            None => Err(fail(field, &format!("\"{field}\" is missing"))),
        };
        let optional = |field: &str| match raw.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(Value::String(_)) => Err(fail(field, &format!("\"{field}\" must not be empty"))),
            Some(_) => Err(fail(field, &format!("\"{field}\" must be a string"))),
        };
        Ok(NetworkEntry {
            name: required("name")?,
            aci: required("aci")?,
            container_interface: optional("containerInterface")?,
            plugin_type: optional("type")?,
            raw: raw.clone(),
        })
    }

    /// Parses one entry from JSON bytes (what the executables read on stdin).
    pub fn from_slice(bytes: &[u8]) -> Result<NetworkEntry, ModelError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| ModelError::Json(e.to_string()))?;
        NetworkEntry::from_value(0, &value)
    }

    /// The entry as JSON bytes, every key as written.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.raw).expect("a JSON map always serialises")
    }

    /// The plugin's own keys: the entry without Kurma's (`aci`, `containerInterface`).
    pub fn plugin_keys(&self) -> Map<String, Value> {
        self.raw
            .iter()
            .filter(|(k, _)| !KURMA_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The CNI network configuration the plugin runs with: the plugin's keys over the
    /// image's `defaults` (e.g. `type: loopback` in an image with one plugin), and
    /// `cniVersion` set to [`DEFAULT_CNI_VERSION`] when neither names one.
    pub fn cni_config(&self, defaults: &Map<String, Value>) -> Map<String, Value> {
        let mut conf = defaults.clone();
        conf.extend(self.plugin_keys());
        conf.entry("cniVersion").or_insert_with(|| Value::String(DEFAULT_CNI_VERSION.to_string()));
        conf
    }
}

/// The version a plugin is asked in when the entry names none: the newest, so that the
/// result carries everything and [`KurmaResult::from_cni`] picks what Kurma shows.
pub const DEFAULT_CNI_VERSION: Version = Version::LATEST;

fn entry_error(index: usize, name: Option<String>, field: &str, reason: &str) -> ModelError {
    ModelError::Entry { index, name, field: field.to_string(), reason: reason.to_string() }
}

/// The `container_networks` of a Kurma configuration, in order. Every entry must have a
/// `name` and an `aci`, and names must be unique.
pub fn parse_container_networks(config: &Value) -> Result<Vec<NetworkEntry>, ModelError> {
    let Some(Value::Array(entries)) = config.get("container_networks") else {
        return Err(ModelError::NoNetworks);
    };
    let mut parsed: Vec<NetworkEntry> = Vec::with_capacity(entries.len());
    for (index, value) in entries.iter().enumerate() {
        let entry = NetworkEntry::from_value(index, value)?;
        if let Some(first) = parsed.iter().position(|e| e.name == entry.name) {
            let reason = format!("the name is already used by container_networks[{first}]");
            return Err(entry_error(index, Some(entry.name), "name", &reason));
        }
        parsed.push(entry);
    }
    Ok(parsed)
}

/// Parses a whole Kurma configuration file's bytes; see [`parse_container_networks`].
pub fn parse_config_bytes(bytes: &[u8]) -> Result<Vec<NetworkEntry>, ModelError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ModelError::Json(e.to_string()))?;
    parse_container_networks(&value)
}

/// What `add` prints on success: the container's addresses in the Kurma specification's
/// `ip4` / `ip6` form (plus `dns` when the plugin reported any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KurmaResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip4: Option<KurmaIp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<KurmaIp>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

/// One address family's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KurmaIp {
    /// The address with its prefix length, e.g. `10.10.0.2/16`.
    pub ip: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<KurmaRoute>,
}

/// A route of one family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KurmaRoute {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

impl KurmaResult {
    /// Converts a CNI result. Per family it takes the first address on the container's
    /// interface `ifname` (an interface with a sandbox), else the first address on any
    /// container interface, else the first address at all (an IPAM-style result); the
    /// routes go with the family of their destination. A result without addresses
    /// converts to `{}`; the loopback plugin's gives `127.0.0.1/8` and `::1/128`.
    pub fn from_cni(result: &CniResult, ifname: Option<&str>) -> KurmaResult {
        let family = |v4: bool| {
            let of_family = |ip: &&cni_types::IpConfig| ip.is_ipv4() == v4;
            let on = |pred: &dyn Fn(&cni_types::Interface) -> bool| {
                result
                    .ips
                    .iter()
                    .filter(of_family)
                    .find(|ip| ip.interface.and_then(|i| result.interfaces.get(i)).is_some_and(pred))
            };
            let chosen = on(&|i| !i.sandbox.is_empty() && Some(i.name.as_str()) == ifname)
                .or_else(|| on(&|i| !i.sandbox.is_empty()))
                .or_else(|| result.ips.iter().find(of_family))?;
            let routes = result
                .routes
                .iter()
                .filter(|r| r.dst.addr().is_ipv4() == v4)
                .map(|r| KurmaRoute { dst: r.dst, gw: r.gw })
                .collect();
            Some(KurmaIp { ip: chosen.address, gateway: chosen.gateway, routes })
        };
        KurmaResult { ip4: family(true), ip6: family(false), dns: result.dns.clone() }
    }

    /// Converts a CNI result's JSON, read in the version it names (or `default_version`).
    pub fn from_cni_json(
        json: &Value,
        default_version: Version,
        ifname: Option<&str>,
    ) -> Result<KurmaResult, cni_types::result::ResultError> {
        let (result, _) = CniResult::parse(json.clone(), default_version)?;
        Ok(KurmaResult::from_cni(&result, ifname))
    }
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
