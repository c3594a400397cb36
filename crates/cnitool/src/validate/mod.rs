//! `cnitool validate`: loads conflists as libcni does and reports, per plugin, what would
//! go wrong or be silently ignored — without touching the network. The only processes it
//! runs are the plugins themselves, asked VERSION.
//!
//! For every plugin: is it in CNI_PATH (its IPAM plugin too), does it speak the list's
//! version. For plugins that are ours ([`ours`]: cni-plugins' registry), also: keys no code reads
//! (with a did-you-mean), the plugin's own ADD config stage (wrong types, values out of
//! range, with the plugin's CNI error), and capabilities enabled that the plugin never
//! reads. A foreign plugin's keys and values are not judged: its types are not known here.
//!
//! Errors are for what would fail at ADD; an unknown key is a warning, since every plugin
//! ignores keys it does not read (the spec's own example has `keyA`, minikube's bridge
//! `addIf`). Across plugins ([`semantics`]): a host-local gateway outside its subnet, and
//! a chained plugin with no interface plugin before it, are errors.

mod keys;
mod ours;
mod semantics;

use crate::commands::{print_json, Context, Failure};
use cni_types::VersionInfo;
use keys::{KeyNote, Known};
use libcni::NetworkConfigList;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A configuration file larger than this is not loaded: real ones are a few KiB, and a
/// file a CI job validates may come from anyone. (libcni's own bound, which its read
/// enforces: this is only the early, friendlier message.)
const MAX_FILE_BYTES: u64 = libcni::MAX_CONF_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One thing found in one file.
#[derive(Debug, Clone)]
pub struct Finding {
    pub file: String,
    pub network: Option<String>,
    /// The plugin's index in the list and its type; `None` for the list itself.
    pub plugin: Option<(usize, String)>,
    pub severity: Severity,
    /// The key path inside the plugin object (or the list) the finding is about.
    pub key: Option<String>,
    pub message: String,
    pub suggestion: Option<String>,
}

impl Finding {
    fn to_json(&self) -> Value {
        json!({
            "file": self.file,
            "network": self.network,
            "pluginIndex": self.plugin.as_ref().map(|(i, _)| i),
            "pluginType": self.plugin.as_ref().map(|(_, t)| t),
            "severity": self.severity.as_str(),
            "key": self.key,
            "message": self.message,
            "suggestion": self.suggestion,
        })
    }

    fn to_line(&self) -> String {
        let mut line = format!("{}:", self.file);
        if let Some(network) = &self.network {
            line.push_str(&format!(" network {network:?}:"));
        }
        if let Some((index, plugin_type)) = &self.plugin {
            line.push_str(&format!(" plugin {index} ({plugin_type}):"));
        }
        line.push_str(&format!(" {}:", self.severity.as_str()));
        if let Some(key) = &self.key {
            line.push_str(&format!(" `{key}`:"));
        }
        line.push_str(&format!(" {}", self.message));
        if let Some(suggestion) = self.suggestion.as_ref().filter(|_| self.severity != Severity::Note) {
            line.push_str(&format!(" (did you mean `{suggestion}`?)"));
        }
        printable(&line)
    }
}

/// `text` with control characters escaped: keys and values come from the file, and a
/// terminal must not take them for escape sequences.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

/// `cnitool validate <target>`: `target` is a conflist/conf file, a directory of them, or
/// the name of a network in NETCONFPATH. Prints the findings; fails when one is an error.
pub fn validate(ctx: &Context, target: &str) -> Result<(), Failure> {
    let files = target_files(ctx, target).inspect_err(|Failure(message)| {
        // A CI job reading the JSON gets the reason there too, not only on stderr.
        if ctx.options.json {
            let finding = Finding {
                file: target.to_string(),
                network: None,
                plugin: None,
                severity: Severity::Error,
                key: None,
                message: message.clone(),
                suggestion: None,
            };
            print_json(&json!([finding.to_json()]));
        }
    })?;
    let mut validator =
        Validator { ctx, versions: BTreeMap::new(), networks: BTreeMap::new(), findings: Vec::new() };
    for file in &files {
        validator.file(file);
    }
    let findings = validator.findings;
    if ctx.options.json {
        print_json(&Value::Array(findings.iter().map(Finding::to_json).collect()));
    } else {
        for finding in &findings {
            println!("{}", finding.to_line());
        }
    }
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
    if !ctx.options.json {
        println!(
            "{} file(s): {errors} error(s), {warnings} warning(s), {} note(s)",
            files.len(),
            count(Severity::Note)
        );
    }
    match errors {
        0 => Ok(()),
        n => Err(Failure(format!("{n} error(s) found"))),
    }
}

/// The files to check: the file itself, a directory's configuration files (as libcni
/// finds them, in its order), or the file a network name is loaded from.
fn target_files(ctx: &Context, target: &str) -> Result<Vec<PathBuf>, Failure> {
    let path = Path::new(target);
    if path.is_dir() {
        // In libcni's order of precedence: lists first, then single-plugin files.
        let mut files = libcni::conf_files(path, &["conflist"])?;
        files.extend(libcni::conf_files(path, &["conf", "json"])?);
        if files.is_empty() {
            return Err(Failure(format!("{target}: no *.conflist, *.conf or *.json files")));
        }
        return Ok(files);
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => return Ok(vec![path.to_path_buf()]),
        // A FIFO, a device (a link to /dev/zero) or a socket: never opened, never read.
        Ok(_) => return Err(Failure(format!("{target}: not a regular file (a FIFO, device or socket)"))),
        Err(e) if target.contains('/') && e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure(format!("{target}: no such file or directory")))
        }
        // A link loop, a directory we may not search: say what the system said.
        Err(e) if target.contains('/') => return Err(Failure(format!("{target}: {e}"))),
        Err(_) => {}
    }
    let list = libcni::load_network(&ctx.netconf_dir, target)?;
    list.source.ok_or_else(|| Failure(format!("network {target:?} has no file"))).map(|file| vec![file])
}

struct Validator<'a> {
    ctx: &'a Context,
    /// Each plugin type's VERSION answer (or why there is none), asked once.
    versions: BTreeMap<String, Result<VersionInfo, String>>,
    /// The file each network name was first loaded from: libcni uses that one.
    networks: BTreeMap<String, String>,
    findings: Vec<Finding>,
}

impl Validator<'_> {
    fn file(&mut self, file: &Path) {
        let name = file.display().to_string();
        if let Some(size) = std::fs::metadata(file).ok().map(|m| m.len()).filter(|s| *s > MAX_FILE_BYTES) {
            let message = format!("{size} bytes: larger than {MAX_FILE_BYTES}, not loaded");
            self.push(&name, None, None, Severity::Error, None, message, None);
            return;
        }
        let list = match NetworkConfigList::from_file(file) {
            Ok(list) => list,
            Err(e) => {
                self.push(&name, None, None, Severity::Error, None, e.to_string(), None);
                return;
            }
        };
        if let Some(first) = self.networks.get(list.name()) {
            let message =
                format!("network {:?} is also defined by {first}, which libcni loads instead", list.name());
            self.push(&name, Some(&list), None, Severity::Warning, Some("name".into()), message, None);
        } else {
            self.networks.insert(list.name().to_string(), name.clone());
        }
        if file.extension().is_some_and(|e| e == "conflist") {
            self.list_keys(&name, &list);
        }
        for index in 0..list.plugins().len() {
            self.plugin(&name, &list, index);
        }
        self.chain_order(&name, &list);
    }

    /// Chained plugins first in the list: their ADD gets no prevResult and is refused.
    fn chain_order(&mut self, file: &str, list: &NetworkConfigList) {
        let types: Vec<&str> = (0..list.plugins().len()).map(|i| list.plugin_type(i)).collect();
        for index in semantics::chained_without_interface(&types, list.version, ours::is_chained) {
            let plugin_type = types[index];
            let message = format!(
                "{plugin_type} is a chained plugin and needs a prevResult, but no plugin before it creates an interface: put an interface plugin (bridge, ptp, macvlan, ...) first"
            );
            let at = Some((index, plugin_type.to_string()));
            self.push(file, Some(list), at, Severity::Error, Some("type".into()), message, None);
        }
    }

    /// Unknown keys at the top of a conflist (its plugins are checked one by one).
    fn list_keys(&mut self, file: &str, list: &NetworkConfigList) {
        let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(&list.bytes) else { return };
        let Some(list_keys) = ours::list_keys() else { return };
        let known = Known { keys: list_keys, open: ["plugins".to_string()].into() };
        for note in keys::check(&top, &known) {
            self.key_note(file, list, None, "libcni", note);
        }
    }

    fn plugin(&mut self, file: &str, list: &NetworkConfigList, index: usize) {
        let plugin_type = list.plugin_type(index).to_string();
        let at = Some((index, plugin_type.clone()));
        let conf = &list.plugins()[index];
        let ipam_type = conf.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str);
        self.presence_and_version(file, list, &at, &plugin_type, None);
        if let Some(ipam_type) = ipam_type {
            self.presence_and_version(file, list, &at, ipam_type, Some("ipam.type"));
        }
        // host-local's range format is known whoever delegates to it.
        for (key, message) in semantics::gateways_outside_subnets(conf) {
            self.push(file, Some(list), at.clone(), Severity::Error, Some(key), message, None);
        }
        let Some(own_keys) = ours::plugin_keys(&plugin_type) else { return };
        let ipam_keys = ipam_type.and_then(ours::plugin_keys);
        self.keys(file, list, &at, conf, own_keys, ipam_keys, ipam_type.is_some());
        self.config_stage(file, list, &at, conf, &plugin_type);
        self.capabilities(file, list, &at, conf, &plugin_type, ipam_type);
    }

    fn presence_and_version(
        &mut self,
        file: &str,
        list: &NetworkConfigList,
        at: &Option<(usize, String)>,
        plugin_type: &str,
        key: Option<&str>,
    ) {
        let cni = &self.ctx.cni;
        let answer = self
            .versions
            .entry(plugin_type.to_string())
            .or_insert_with(|| match cni.find_plugin(plugin_type) {
                Err(e) => Err(e.to_string()),
                Ok(_) => {
                    cni.get_version_info(plugin_type).map_err(|e| format!("asking it VERSION failed: {e}"))
                }
            })
            .clone();
        let (message, suggestion) = match answer {
            Ok(info) if info.supports(list.version.as_str()) => return,
            Ok(info) => (
                format!(
                    "plugin {plugin_type:?} does not support cniVersion {} (it supports {})",
                    list.version,
                    info.supported_versions.join(", ")
                ),
                info.supported_versions.last().cloned(),
            ),
            Err(message) => (message, None),
        };
        let key = key.map(str::to_string);
        self.push(file, Some(list), at.clone(), Severity::Error, key, message, suggestion);
    }

    #[allow(clippy::too_many_arguments)]
    fn keys(
        &mut self,
        file: &str,
        list: &NetworkConfigList,
        at: &Option<(usize, String)>,
        conf: &Map<String, Value>,
        own: ours::Keys,
        ipam: Option<ours::Keys>,
        has_ipam: bool,
    ) {
        let mut known = Known { keys: own.keys, open: own.open };
        known.keys.extend(ours::common_keys());
        // Filled in by the runtime, or a convention other tools put anything under.
        known.open.extend(["capabilities", "args", "runtimeConfig", "prevResult"].map(String::from));
        match ipam {
            Some(ipam) => {
                known.keys.extend(ipam.keys);
                known.open.extend(ipam.open);
            }
            // A foreign IPAM plugin reads `ipam`: its keys are its own business.
            None if has_ipam => {
                known.open.insert("ipam".into());
            }
            None => {}
        }
        let reader = match conf.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str) {
            Some(ipam_type) if has_ipam => {
                format!("neither {} nor {ipam_type}", at.as_ref().map_or("", |(_, t)| t))
            }
            _ => at.as_ref().map_or_else(String::new, |(_, t)| t.clone()),
        };
        for note in keys::check(conf, &known) {
            self.key_note(file, list, at.clone(), &reader, note);
        }
    }

    /// `reader` names what would read the key: "libcni", "bridge", "neither bridge nor host-local".
    fn key_note(
        &mut self,
        file: &str,
        list: &NetworkConfigList,
        at: Option<(usize, String)>,
        reader: &str,
        note: KeyNote,
    ) {
        let reads = if reader.starts_with("neither ") { "reads" } else { "does not read" };
        let (severity, key, message, suggestion) = match note {
            // A warning: plugins ignore keys they do not read, so the network still works;
            // only the setting the author meant (a typo's suggestion) is not applied.
            KeyNote::Unknown { path, suggestion } => {
                (Severity::Warning, path, format!("unknown key: {reader} {reads} it"), suggestion)
            }
            KeyNote::Case { path, documented } => (
                Severity::Note,
                path,
                format!(
                    "accepted (keys match case-insensitively); the documented spelling is `{documented}`"
                ),
                Some(documented),
            ),
        };
        self.push(file, Some(list), at, severity, Some(key), message, suggestion);
    }

    /// The plugin's own validation, as its ADD runs it before touching anything.
    fn config_stage(
        &mut self,
        file: &str,
        list: &NetworkConfigList,
        at: &Option<(usize, String)>,
        conf: &Map<String, Value>,
        plugin_type: &str,
    ) {
        let mut conf = conf.clone();
        conf.insert("name".into(), json!(list.name()));
        conf.insert("cniVersion".into(), json!(list.version.as_str()));
        if let Some(Err(e)) = ours::check_add(plugin_type, &conf, list.version) {
            let details = if e.details.is_empty() { String::new() } else { format!(" ({})", e.details) };
            let message = format!("refused by the plugin (code {}): {}{details}", e.code, e.msg);
            self.push(file, Some(list), at.clone(), Severity::Error, None, message, None);
        }
    }

    /// Capabilities enabled that neither the plugin nor its IPAM plugin reads: the
    /// runtime's arguments for them would be passed and ignored.
    fn capabilities(
        &mut self,
        file: &str,
        list: &NetworkConfigList,
        at: &Option<(usize, String)>,
        conf: &Map<String, Value>,
        plugin_type: &str,
        ipam_type: Option<&str>,
    ) {
        let Some(Value::Object(enabled)) = conf.get("capabilities") else { return };
        let mut read: BTreeSet<String> = ours::capabilities(plugin_type).unwrap_or_default();
        match ipam_type.map(ours::capabilities) {
            Some(Some(ipam)) => read.extend(ipam),
            // A foreign IPAM plugin may read any capability.
            Some(None) => return,
            None => {}
        }
        for (name, _) in enabled.iter().filter(|(_, on)| on.as_bool() == Some(true)) {
            if !read.contains(name) {
                let message = format!("capability {name:?} is enabled but {plugin_type} never reads it");
                let key = Some(format!("capabilities.{name}"));
                self.push(file, Some(list), at.clone(), Severity::Warning, key, message, None);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        file: &str,
        list: Option<&NetworkConfigList>,
        plugin: Option<(usize, String)>,
        severity: Severity,
        key: Option<String>,
        message: String,
        suggestion: Option<String>,
    ) {
        self.findings.push(Finding {
            file: file.to_string(),
            network: list.map(|l| l.name().to_string()),
            plugin,
            severity,
            key,
            message,
            suggestion,
        });
    }
}
