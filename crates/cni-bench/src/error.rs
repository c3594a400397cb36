//! What can stop a workload run.

/// (Library errors are boxed: they are large, and results are passed around a lot.)
///
/// A failure of the benchmark itself (setup) or of a plugin set under test. Either ends
/// the current workload for that set; the others go on.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{context}: {source}")]
    Setup {
        context: String,
        #[source]
        source: Box<cni_net::Error>,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A plugin call failed: the set under test did not do its job.
    #[error("{context}: {source}")]
    Cni {
        context: String,
        #[source]
        source: Box<libcni::Error>,
    },
    /// A plugin run outside libcni (VERSION, IPAM alone, RSS) failed.
    #[error("{0}")]
    Plugin(String),
    /// The library under test (cni-net's nftables client, in the `nft` workload) failed.
    #[error("{0}")]
    Library(String),
    /// A correctness check of a workload failed (duplicate IP, wrong count, ...).
    #[error("check failed: {0}")]
    Check(String),
    #[error("interrupted")]
    Interrupted,
}

impl BenchError {
    pub fn setup(context: impl Into<String>, source: cni_net::Error) -> BenchError {
        BenchError::Setup { context: context.into(), source: Box::new(source) }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io { context: context.into(), source }
    }

    pub fn cni(context: impl Into<String>, source: libcni::Error) -> BenchError {
        BenchError::Cni { context: context.into(), source: Box::new(source) }
    }
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;
