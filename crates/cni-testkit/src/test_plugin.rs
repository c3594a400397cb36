//! The scriptable test plugin's behaviour and invocation log.
//!
//! Behaviour is read from, in order: the config key `testBehaviour` (an object), the file
//! named by the config key `debugFile`, the file named by CNI_ARGS `DEBUG=<path>`, the
//! file named by the environment variable `CNI_TEST_BEHAVIOUR` (the only source for
//! VERSION, which has no configuration). `perCommand` entries override the top level for
//! one verb. Every invocation is appended as one JSON line to the file named by the config
//! key `logFile` or the environment variable `CNI_TEST_LOG`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// What the test plugin does. Every field is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Behaviour {
    /// ADD returns this result (any version's layout; without `cniVersion` it is taken to be
    /// in the configuration's version), converted to the request's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The verb fails with this error object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<cni_types::CniError>,
    /// ADD returns `prevResult` unchanged.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub echo_prev_result: bool,
    /// Written to stderr before anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Bypasses the SDK: prints `stdout` verbatim and exits with this code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Sleeps this long first (for timeout tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_ms: Option<u64>,
    /// Panics inside the verb (the SDK must still print an error object).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub panic: bool,
    /// VERSION answers with these instead of every version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported_versions: Option<Vec<String>>,
    /// Per-verb overrides ("ADD", "DEL", ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub per_command: BTreeMap<String, Behaviour>,
}

impl Behaviour {
    /// The behaviour for `command`: the top level with that verb's override laid over it.
    pub fn for_command(&self, command: &str) -> Behaviour {
        let mut merged = self.clone();
        merged.per_command.clear();
        if let Some(o) = self.per_command.get(command) {
            let o = o.clone();
            merged.result = o.result.or(merged.result);
            merged.error = o.error.or(merged.error);
            merged.echo_prev_result |= o.echo_prev_result;
            merged.stderr = o.stderr.or(merged.stderr);
            merged.exit_code = o.exit_code.or(merged.exit_code);
            merged.stdout = o.stdout.or(merged.stdout);
            merged.sleep_ms = o.sleep_ms.or(merged.sleep_ms);
            merged.panic |= o.panic;
            merged.supported_versions = o.supported_versions.or(merged.supported_versions);
        }
        merged
    }

    /// Writes the behaviour to a file a test can point the plugin at.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec(self).expect("behaviour serialises"))
    }
}

/// One recorded invocation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Invocation {
    pub command: String,
    /// Every CNI_* variable the plugin saw, and the trace context's (`TRACEPARENT`...).
    pub env: BTreeMap<String, String>,
    /// stdin, parsed as JSON when it is JSON (else a string).
    pub stdin: Value,
    pub pid: u32,
}

impl Invocation {
    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Appends one invocation to the log as a single write, so that concurrent plugin
/// processes never interleave their lines.
pub fn record(log: &Path, invocation: &Invocation) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(invocation).expect("invocation serialises");
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    file.write_all(&line)
}

/// Reads back every invocation recorded in `log` (none if it does not exist).
pub fn read_log(log: &Path) -> Vec<Invocation> {
    match std::fs::read_to_string(log) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l:?}: {e}")))
            .collect(),
        Err(_) => Vec::new(),
    }
}
