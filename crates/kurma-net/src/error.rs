//! The host side's errors. Every variant names what it is about (a network entry, a
//! container, an executable) so a message alone tells the operator where to look.

use std::path::PathBuf;
use std::time::Duration;

/// Where a `container_networks` entry sits: its position and, when it has one, its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    pub index: usize,
    pub name: Option<String>,
}

impl std::fmt::Display for EntryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "container_networks[{}] (\"{name}\")", self.index),
            None => write!(f, "container_networks[{}]", self.index),
        }
    }
}

/// How a netplugin executable failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFailure {
    /// It exited with a non-zero code.
    Exit(i32),
    /// It was killed by a signal.
    Signal(i32),
    /// It ran past its limit and was killed.
    Timeout(Duration),
}

impl std::fmt::Display for ExecFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecFailure::Exit(code) => write!(f, "exited with code {code}"),
            ExecFailure::Signal(signal) => write!(f, "was killed by signal {signal}"),
            ExecFailure::Timeout(limit) => write!(f, "did not return within its limit of {limit:?}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid Kurma configuration: {0}")]
    Config(String),
    #[error("{entry}: {message}")]
    Entry { entry: EntryRef, message: String },
    #[error("network \"{network}\": image {uri}: {source}")]
    Image { network: String, uri: String, source: Box<crate::source::PullError> },
    #[error(
        "network \"{network}\": /opt/network/{executable} {failure}; stdout: {stdout:?}; stderr: {stderr:?}"
    )]
    Executable {
        network: String,
        executable: &'static str,
        failure: ExecFailure,
        stdout: String,
        stderr: String,
    },
    #[error("network \"{network}\": {message}")]
    Network { network: String, message: String },
    #[error("OCI runtime {runtime}: {source}")]
    Runtime { runtime: String, source: crate::runtime::RuntimeError },
    #[error("container {uuid}: {message}")]
    Container { uuid: String, message: String },
    #[error("detach of container {uuid} failed for {} network(s): {}", .errors.len(),
        .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Detach { uuid: String, errors: Vec<Error> },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {path}: {message}")]
    State { path: PathBuf, message: String },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    /// The exit code of the netplugin executable behind this error, when it exited.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Error::Executable { failure: ExecFailure::Exit(code), .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
