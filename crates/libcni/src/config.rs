//! Finding and loading network configurations.
//!
//! A directory holds `*.conflist` lists (looked at first, in lexical order) and older
//! single-plugin `*.conf` / `*.json` files (upconverted to a list of one). A list may also
//! take plugins from `<dir>/<network name>/*.conf` unless `loadOnlyInlinedPlugins` is set.
//! Every validation error names the file and the field.

use crate::error::{Error, Result};
use cni_types::validate::{validate_network_name, validate_plugin_type};
use cni_types::version::select_list_version;
use cni_types::{fold, NetConfList, Version};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// A loaded network configuration list, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// The parsed list; `plugins` includes any sibling plugin files.
    pub list: NetConfList,
    /// The version the runtime speaks with this list's plugins (highest supported of
    /// `cniVersion` ∪ `cniVersions`).
    pub version: Version,
    /// The list's bytes, as stored in the result cache.
    pub bytes: Vec<u8>,
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
}

/// A single-plugin configuration (a `.conf` file), run as a list of one.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfig {
    pub conf: Map<String, Value>,
    pub version: Version,
    pub bytes: Vec<u8>,
    pub source: Option<PathBuf>,
}

impl NetworkConfigList {
    /// Parses the bytes of a `.conflist`.
    pub fn from_bytes(bytes: &[u8]) -> Result<NetworkConfigList> {
        parse_list(bytes, "<bytes>", None)
    }

    /// Loads a file: a `.conflist` as a list (with the sibling plugin files in
    /// `<file's dir>/<name>/*.conf` appended unless `loadOnlyInlinedPlugins` is set),
    /// anything else as a single-plugin configuration upconverted to a list.
    pub fn from_file(path: impl AsRef<Path>) -> Result<NetworkConfigList> {
        let path = path.as_ref();
        let bytes = read_conf(path)?;
        let origin = path.display().to_string();
        if path.extension().is_none_or(|e| e != "conflist") {
            return Ok(parse_conf(&bytes, &origin, Some(path))?.into_list());
        }
        let mut list = parse_list(&bytes, &origin, Some(path))?;
        list.append_sibling_plugins(path.parent().unwrap_or(Path::new(".")))?;
        Ok(list)
    }

    /// The network name.
    pub fn name(&self) -> &str {
        &self.list.name
    }

    /// The plugin objects in chain order.
    pub fn plugins(&self) -> &[Map<String, Value>] {
        &self.list.plugins
    }

    /// The `type` of plugin `index` (validated at load time).
    pub fn plugin_type(&self, index: usize) -> &str {
        fold::get(&self.list.plugins[index], "type").and_then(Value::as_str).unwrap_or_default()
    }

    fn origin(&self) -> String {
        self.source.as_ref().map_or_else(|| "<bytes>".to_string(), |p| p.display().to_string())
    }

    /// Appends `<dir>/<name>/*.conf` plugin objects, in lexical order.
    fn append_sibling_plugins(&mut self, dir: &Path) -> Result<()> {
        if !self.list.load_only_inlined_plugins {
            let plugin_dir = dir.join(&self.list.name);
            let files = if plugin_dir.is_dir() { conf_files(&plugin_dir, &["conf"])? } else { Vec::new() };
            for file in &files {
                let origin = file.display().to_string();
                let bytes = read_conf(file)?;
                let plugin = json_object(&bytes, &origin)?;
                check_plugin_type(&plugin, &origin, "type")?;
                self.list.plugins.push(plugin);
            }
            if !files.is_empty() {
                // The cache must record the chain that actually ran.
                self.bytes = serde_json::to_vec(&self.list).expect("a list always serialises");
            }
        }
        if self.list.plugins.is_empty() {
            return Err(Error::InvalidConfig {
                origin: self.origin(),
                field: "plugins".into(),
                reason: "the list has no plugins".into(),
            });
        }
        Ok(())
    }
}

impl NetworkConfig {
    /// Parses a single-plugin configuration.
    pub fn from_bytes(bytes: &[u8]) -> Result<NetworkConfig> {
        parse_conf(bytes, "<bytes>", None)
    }

    /// The list of one this configuration runs as. Its cache records the conf's own bytes.
    pub fn as_list(&self) -> NetworkConfigList {
        let mut list = self.clone().into_list();
        list.bytes = self.bytes.clone();
        list
    }

    fn into_list(self) -> NetworkConfigList {
        let list = NetConfList::from_plugin_conf(self.conf);
        let bytes = serde_json::to_vec(&list).expect("a list always serialises");
        NetworkConfigList { list, version: self.version, bytes, source: self.source }
    }
}

/// The largest configuration file loaded. Real ones are a few KiB; whoever can write the
/// configuration directory (or a file a link there leads to) must not make a runtime
/// read without end.
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// A configuration file's bytes: a regular file (links followed) of at most
/// [`MAX_CONF_BYTES`], read without blocking on a FIFO or device put in its place after
/// the directory was listed. The error names the file and the bound.
fn read_conf(path: &Path) -> Result<Vec<u8>> {
    cni_os::fs::read_regular_limited(path, MAX_CONF_BYTES)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

/// The files in `dir` whose extension is one of `extensions`, in lexical order.
pub fn conf_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?.path();
        let wanted = path.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e));
        if wanted && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Finds network `name` in `dir`: the first `*.conflist` naming it, else the first
/// `*.conf` / `*.json` naming it (upconverted). A broken file that names another network
/// does not stand in the way; one that names this network (or whose name cannot be read)
/// is reported.
pub fn load_network(dir: impl AsRef<Path>, name: &str) -> Result<NetworkConfigList> {
    let dir = dir.as_ref();
    for extensions in [&["conflist"][..], &["conf", "json"][..]] {
        for file in conf_files(dir, extensions)? {
            let bytes = read_conf(&file)?;
            let declared = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("name").and_then(Value::as_str).map(str::to_string));
            if declared.as_deref().is_some_and(|n| n != name) {
                continue;
            }
            return NetworkConfigList::from_file(&file);
        }
    }
    Err(Error::NetworkNotFound { name: name.to_string(), dir: dir.to_path_buf() })
}

fn json_object(bytes: &[u8], origin: &str) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Error::ConfigDecode {
            origin: origin.into(),
            reason: format!("expected a JSON object, found {}", kind_of(&other)),
        }),
        Err(e) => Err(Error::ConfigDecode { origin: origin.into(), reason: e.to_string() }),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(origin: &str, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfig { origin: origin.into(), field: field.into(), reason: reason.into() }
}

fn check_name(map: &Map<String, Value>, origin: &str) -> Result<String> {
    let name = match map.get("name") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(invalid(origin, "name", format!("expected a string, found {}", kind_of(other))))
        }
        None => return Err(invalid(origin, "name", "missing")),
    };
    validate_network_name(&name).map_err(|e| invalid(origin, "name", e.to_string()))?;
    Ok(name)
}

fn string_field<'a>(map: &'a Map<String, Value>, key: &str, origin: &str) -> Result<&'a str> {
    match map.get(key) {
        None => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(invalid(origin, key, format!("expected a string, found {}", kind_of(other)))),
    }
}

fn check_plugin_type(plugin: &Map<String, Value>, origin: &str, field: &str) -> Result<()> {
    let plugin_type = match fold::get(plugin, "type") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(invalid(origin, field, format!("expected a string, found {}", kind_of(other))))
        }
        None => return Err(invalid(origin, field, "missing")),
    };
    validate_plugin_type(plugin_type).map_err(|e| invalid(origin, field, e.msg))
}

fn supported_versions_text() -> String {
    Version::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
}

/// Picks the version to speak: the highest we support of `cniVersion` ∪ `cniVersions`.
fn select_version(map: &Map<String, Value>, origin: &str) -> Result<Version> {
    let declared = string_field(map, "cniVersion", origin)?;
    let mut listed = Vec::new();
    match map.get("cniVersions") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => listed.push(s.clone()),
                    other => {
                        return Err(invalid(
                            origin,
                            &format!("cniVersions[{i}]"),
                            format!("expected a string, found {}", kind_of(other)),
                        ))
                    }
                }
            }
        }
        Some(other) => {
            return Err(invalid(
                origin,
                "cniVersions",
                format!("expected an array, found {}", kind_of(other)),
            ))
        }
    }
    if declared.is_empty() && listed.is_empty() {
        return Ok(Version::V0_1_0);
    }
    match select_list_version(declared, &listed, |v| Version::parse(v).is_ok()) {
        Some(v) => Ok(Version::parse(v).expect("selected versions are supported")),
        None => {
            let field = if listed.is_empty() { "cniVersion" } else { "cniVersions" };
            Err(invalid(
                origin,
                field,
                format!(
                    "no supported version among {:?} (supported: {})",
                    {
                        let mut all = vec![declared.to_string()];
                        all.extend(listed.iter().cloned());
                        all.retain(|v| !v.is_empty());
                        all
                    },
                    supported_versions_text()
                ),
            ))
        }
    }
}

fn check_booleans(map: &Map<String, Value>, origin: &str) -> Result<()> {
    for key in ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"] {
        match map.get(key) {
            None | Some(Value::Bool(_)) => {}
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => {}
            Some(other) => {
                return Err(invalid(
                    origin,
                    key,
                    format!("expected a boolean or \"true\"/\"false\", found {other}"),
                ))
            }
        }
    }
    Ok(())
}

fn parse_list(bytes: &[u8], origin: &str, source: Option<&Path>) -> Result<NetworkConfigList> {
    let map = json_object(bytes, origin)?;
    check_name(&map, origin)?;
    let version = select_version(&map, origin)?;
    check_booleans(&map, origin)?;
    match map.get("plugins") {
        None => {}
        Some(Value::Array(plugins)) => {
            for (i, plugin) in plugins.iter().enumerate() {
                let field = format!("plugins[{i}]");
                let Value::Object(plugin) = plugin else {
                    return Err(invalid(
                        origin,
                        &field,
                        format!("expected an object, found {}", kind_of(plugin)),
                    ));
                };
                check_plugin_type(plugin, origin, &format!("{field}.type"))?;
            }
        }
        Some(other) => {
            return Err(invalid(origin, "plugins", format!("expected an array, found {}", kind_of(other))))
        }
    }
    if map.get("plugins").is_none() && map.get("loadOnlyInlinedPlugins").is_some_and(is_true) {
        return Err(invalid(origin, "plugins", "missing, and loadOnlyInlinedPlugins is set"));
    }
    let list: NetConfList = serde_json::from_value(Value::Object(map))
        .map_err(|e| Error::ConfigDecode { origin: origin.into(), reason: e.to_string() })?;
    if source.is_none() && list.plugins.is_empty() {
        return Err(invalid(origin, "plugins", "the list has no plugins"));
    }
    Ok(NetworkConfigList { list, version, bytes: bytes.to_vec(), source: source.map(Path::to_path_buf) })
}

fn is_true(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn parse_conf(bytes: &[u8], origin: &str, source: Option<&Path>) -> Result<NetworkConfig> {
    let conf = json_object(bytes, origin)?;
    check_name(&conf, origin)?;
    check_plugin_type(&conf, origin, "type")?;
    let version = select_version(&conf, origin)?;
    Ok(NetworkConfig { conf, version, bytes: bytes.to_vec(), source: source.map(Path::to_path_buf) })
}

#[cfg(test)]
mod tests;
