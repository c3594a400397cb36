//! One invocation of a plugin: the verb, the environment and the configuration.

use cni_types::args::CniArgs;
use cni_types::{Attachment, CniError, CniResult, NetConf, TraceContext, Version};
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::PathBuf;

/// The verbs of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Whether the verb works on one attachment (and so needs a container ID and ifname).
    pub fn is_per_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a plugin is told for one verb.
#[derive(Debug, Clone)]
pub struct Request {
    pub command: Command,
    /// Empty for GC and STATUS.
    pub container_id: String,
    /// Path of the container's network namespace; may be empty for DEL, GC and STATUS.
    pub netns: String,
    /// Empty for GC and STATUS.
    pub ifname: String,
    pub args: CniArgs,
    /// CNI_PATH, split on ':'.
    pub path: Vec<PathBuf>,
    /// The configuration exactly as received on stdin.
    pub stdin: Vec<u8>,
    /// The fields every plugin configuration has.
    pub conf: NetConf,
    /// The configuration's `cniVersion` ("" is 0.1.0).
    pub version: Version,
    /// The runtime's trace context (`TRACEPARENT`...), when it sent a valid one: what a
    /// plugin passes on to a daemon it asks, and logs with what it reports.
    pub trace: Option<TraceContext>,
}

impl Request {
    /// The plugin's own configuration type, parsed from stdin; errors name the field.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, CniError> {
        crate::config::parse_config(&self.stdin)
    }

    /// `prevResult`, converted into the internal model. A `prevResult` is in the
    /// configuration's version.
    /// A prevResult that names a version nobody knows, or whose addresses point at an
    /// interface it does not list, is refused: acting on it would configure the wrong thing.
    pub fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        let value = match &self.conf.prev_result {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let named = value.as_object().and_then(|object| cni_types::fold::get(object, "cniVersion"));
        if let Some(version) = named.and_then(serde_json::Value::as_str) {
            if Version::parse(version).is_err() {
                return Err(CniError::new(
                    cni_types::ErrorCode::IncompatibleVersion,
                    format!("prevResult.cniVersion {version:?} is not a CNI version this plugin knows"),
                ));
            }
        }
        let prev = CniResult::from_value(value.clone(), self.version)
            .map_err(|e| CniError::decode(format!("invalid prevResult: {e}")))?;
        for (i, ip) in prev.ips.iter().enumerate() {
            if let Some(index) = ip.interface.filter(|index| *index >= prev.interfaces.len()) {
                return Err(CniError::invalid_config(format!(
                    "invalid prevResult.ips[{i}].interface {index}: prevResult lists {} interfaces",
                    prev.interfaces.len()
                )));
            }
        }
        Ok(Some(prev))
    }

    /// `prevResult`, required (for plugins that can only be chained).
    pub fn require_prev_result(&self) -> Result<CniResult, CniError> {
        self.prev_result()?.ok_or_else(|| {
            CniError::invalid_config(format!(
                "{} must be called as a chained plugin: prevResult is missing",
                self.conf.plugin_type
            ))
        })
    }

    /// `prevResult` for a chained plugin's ADD: required from 0.3.0 on (runtimes pass it),
    /// while before 0.3.0 there was none to pass and `None` means "describe what is there".
    pub fn chained_prev_result(&self) -> Result<Option<CniResult>, CniError> {
        match self.prev_result()? {
            Some(prev) => Ok(Some(prev)),
            None if self.version >= Version::V0_3_0 => self.require_prev_result().map(Some),
            None => Ok(None),
        }
    }

    /// The attachment an ADD, DEL or CHECK is about (empty names for GC and STATUS).
    pub fn attachment(&self) -> Attachment {
        Attachment::new(self.container_id.clone(), self.ifname.clone())
    }

    /// The attachments a GC request says are still in use (`cni.dev/valid-attachments`,
    /// or the older `cni.dev/attachments`). The names match without regard to case, as
    /// every other configuration key (the reference decodes them into its `NetConf`): a
    /// list sent as `CNI.dev/valid-attachments` is the list, not a missing one, which would
    /// have GC release every attachment.
    pub fn valid_attachments(&self) -> Result<Vec<Attachment>, CniError> {
        let value = ["cni.dev/valid-attachments", "cni.dev/attachments"]
            .iter()
            .find_map(|k| cni_types::fold::get(&self.conf.extra, k));
        match value {
            None => Ok(Vec::new()),
            Some(v) => crate::config::parse_value("cni.dev/valid-attachments", v),
        }
    }

    /// The network namespace path, required for ADD and CHECK.
    pub fn netns_path(&self) -> Option<&str> {
        (!self.netns.is_empty()).then_some(self.netns.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(conf: &str) -> Request {
        Request {
            command: Command::Gc,
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: CniArgs::default(),
            path: vec![],
            stdin: conf.as_bytes().to_vec(),
            conf: serde_json::from_str(conf).unwrap(),
            version: Version::V1_1_0,
            trace: None,
        }
    }

    #[test]
    fn a_prev_result_of_an_unknown_version_or_pointing_past_its_interfaces_is_refused() {
        let prev =
            |p: &str| request(&format!(r#"{{"cniVersion":"1.1.0","name":"n","type":"t","prevResult":{p}}}"#));
        let ok = r#"{"cniVersion":"1.1.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.0.0.2/24","interface":0}]}"#;
        assert_eq!(prev(ok).prev_result().unwrap().unwrap().ips.len(), 1);
        let e = prev(&ok.replace(r#""cniVersion":"1.1.0""#, r#""cniVersion":"9.0.0""#))
            .prev_result()
            .unwrap_err();
        assert_eq!(e.code, 1, "{e:?}");
        let e = prev(&ok.replace(r#""interface":0"#, r#""interface":1"#)).prev_result().unwrap_err();
        assert_eq!(e.code, 7, "{e:?}");
        assert!(e.msg.contains("prevResult.ips[0].interface 1"), "{}", e.msg);
    }

    #[test]
    fn valid_attachments_from_either_key() {
        let r = request(
            r#"{"cniVersion":"1.1.0","name":"n","type":"t","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#,
        );
        assert_eq!(
            r.valid_attachments().unwrap(),
            vec![Attachment { container_id: "a".into(), ifname: "eth0".into() }]
        );
        let r = request(r#"{"cniVersion":"1.1.0","name":"n","type":"t","cni.dev/attachments":[]}"#);
        assert!(r.valid_attachments().unwrap().is_empty());
        let r =
            request(r#"{"cniVersion":"1.1.0","name":"n","type":"t","cni.dev/attachments":[{"ifname":1}]}"#);
        assert_eq!(r.valid_attachments().unwrap_err().code, 7);
        let r = request(
            r#"{"cniVersion":"1.1.0","name":"n","type":"t","CNI.DEV/Valid-Attachments":[{"containerID":"a","ifname":"eth0"}]}"#,
        );
        assert_eq!(r.valid_attachments().unwrap().len(), 1, "a list spelt otherwise is still the list");
    }

    #[test]
    fn prev_result_is_read_in_the_config_version() {
        let mut r = request(
            r#"{"cniVersion":"0.3.1","name":"n","type":"t","prevResult":{"ips":[{"version":"4","address":"10.0.0.2/24"}]}}"#,
        );
        r.version = Version::V0_3_1;
        assert_eq!(r.prev_result().unwrap().unwrap().ips[0].address.to_string(), "10.0.0.2/24");
        let r = request(r#"{"cniVersion":"1.1.0","name":"n","type":"t"}"#);
        assert_eq!(r.require_prev_result().unwrap_err().code, 7);
    }

    #[test]
    fn chained_prev_result_is_required_from_0_3_0_only() {
        let mut r = request(r#"{"cniVersion":"0.2.0","name":"n","type":"t"}"#);
        r.version = Version::V0_2_0;
        assert!(r.chained_prev_result().unwrap().is_none());
        r.version = Version::V0_3_0;
        assert_eq!(r.chained_prev_result().unwrap_err().code, 7);
    }
}
