//! Everything that can go wrong between a runtime and its plugins.

use cni_types::{CniError, ErrorCode, Version};
use std::path::PathBuf;
use std::time::Duration;

/// A libcni failure. Plugin failures keep the plugin's own error object and say which
/// plugin (its `type`) failed on which verb.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// A configuration that is not JSON (or not an object). `origin` is the file or `<bytes>`.
    #[error("{origin}: invalid JSON: {reason}")]
    ConfigDecode { origin: String, reason: String },

    /// A configuration whose field `field` is wrong.
    #[error("{origin}: invalid field {field:?}: {reason}")]
    InvalidConfig { origin: String, field: String, reason: String },

    #[error("no network configuration named {name:?} in {}", dir.display())]
    NetworkNotFound { name: String, dir: PathBuf },

    /// A container ID, interface name or similar from the caller that cannot be used.
    #[error("invalid runtime configuration: {0}")]
    InvalidRuntimeConf(CniError),

    /// A plugin `type` that could name something outside the plugin directories.
    #[error("{0}")]
    InvalidPluginType(CniError),

    #[error("plugin {plugin_type:?} not found in {dirs:?}")]
    PluginNotFound { plugin_type: String, dirs: Vec<PathBuf> },

    #[error("cannot run plugin {plugin_type:?} ({}): {source}", path.display())]
    Spawn {
        plugin_type: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("plugin {plugin_type:?} did not finish {command} within {timeout:?}; it and every process it started were killed")]
    Timeout { plugin_type: String, command: String, timeout: Duration },

    /// The plugin failed and printed a CNI error object; `error` is that object, unchanged
    /// (boxed to keep `Result`s small).
    #[error("plugin {plugin_type:?} failed on {command}: {error} (code {})", error.code)]
    Plugin { plugin_type: String, command: String, error: Box<CniError> },

    /// The plugin failed without printing a CNI error object; `output` is what it printed
    /// (stderr when stdout was empty), `status` how it ended.
    #[error("plugin {plugin_type:?} failed on {command} ({status}): {output}")]
    PluginFailed { plugin_type: String, command: String, status: String, output: String },

    /// The plugin succeeded but printed something that is not a valid answer.
    #[error(
        "plugin {plugin_type:?} answered {command} with output that cannot be decoded ({reason}): {output:?}"
    )]
    Decode { plugin_type: String, command: String, reason: String, output: String },

    /// A result that cannot be expressed in the version the list speaks.
    #[error("cannot convert the result of {origin} to CNI version {version}: {reason}")]
    ResultConversion { origin: String, version: Version, reason: String },

    #[error("{command} is not supported by configuration version {version}: it needs {needs} or newer")]
    VerbNotSupported { command: String, version: Version, needs: Version },

    #[error(
        "plugin {plugin_type:?} does not support configuration version {version}; it supports {supported:?}"
    )]
    PluginVersionUnsupported { plugin_type: String, version: String, supported: Vec<String> },

    /// A cache file that cannot be read or written.
    #[error("result cache {}: {reason}", path.display())]
    Cache { path: PathBuf, reason: String },

    #[error("no cached result for network {network:?}, container {container_id:?}, interface {ifname:?}; {command} needs the result of the ADD")]
    NoCachedResult { command: String, network: String, container_id: String, ifname: String },

    /// Several independent failures (GC, validation), in the order they happened.
    #[error("{}", join(.0))]
    Multiple(Vec<Error>),
}

fn join(errors: &[Error]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }

    /// The plugin's own error object, when a plugin failed with one.
    pub fn plugin_error(&self) -> Option<&CniError> {
        match self {
            Error::Plugin { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The failure as a CNI error object (for a runtime that passes errors on in CNI
    /// form): the plugin's own object unchanged, otherwise the closest well-known code.
    pub fn to_cni_error(&self) -> CniError {
        let code = match self {
            Error::Plugin { error, .. } => return (**error).clone(),
            Error::InvalidRuntimeConf(e) | Error::InvalidPluginType(e) => return e.clone(),
            Error::Io { .. } | Error::Cache { .. } | Error::Spawn { .. } => ErrorCode::Io,
            Error::ConfigDecode { .. } | Error::Decode { .. } => ErrorCode::Decode,
            Error::InvalidConfig { .. } | Error::NetworkNotFound { .. } | Error::PluginNotFound { .. } => {
                ErrorCode::InvalidConfig
            }
            Error::ResultConversion { .. }
            | Error::VerbNotSupported { .. }
            | Error::PluginVersionUnsupported { .. } => ErrorCode::IncompatibleVersion,
            Error::Timeout { .. } => ErrorCode::TryAgainLater,
            Error::NoCachedResult { .. } => ErrorCode::UnknownContainer,
            Error::PluginFailed { .. } | Error::Multiple(_) => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
