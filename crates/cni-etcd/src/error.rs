//! What can go wrong talking to etcd.

/// An etcd client error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No configured member answered (connection refused, timed out, no leader).
    #[error("etcd unreachable at {endpoints}: {reason}")]
    Unreachable { endpoints: String, reason: String },
    /// A member answered with an error: `code` is the gRPC status code of the answer
    /// (5: not found, 9: failed precondition, ...; 0 when the answer had none), what callers
    /// branch on; `message` is for people.
    #[error("etcd {path}: {message}")]
    Server { path: String, code: i64, message: String },
    /// The answer was not what the API promises.
    #[error("etcd {path}: unexpected answer: {message}")]
    Protocol { path: String, message: String },
    /// The client configuration is unusable (bad endpoint URL).
    #[error("etcd client: {0}")]
    Config(String),
}

impl Error {
    /// Whether the failure is the store being unavailable (worth retrying later), as
    /// opposed to a request it refused.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unreachable { .. })
    }
}

pub type Result<T> = std::result::Result<T, Error>;
