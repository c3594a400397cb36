//! The overlay at scale, by simulation: N nodes (network namespaces on one underlay
//! bridge), each running its own `cni-overlay-agent` process, and one etcd. What is
//! measured is read from the kernel (netlink dumps of every node's namespace) and from
//! etcd's own `/metrics`, never from the agents' logs:
//!
//! - cold start: every agent started at once, until every node holds exactly its peers'
//!   route, neighbour and FDB entries;
//! - join: a node leaves (SIGTERM, its lease revoked), comes back as a new node (no
//!   subnet file, no device), until every other node has its three entries;
//! - etcd requests per agent per second, in steady state and during joins;
//! - each agent's resident memory.
//!
//! Everything it makes (namespaces, veths, processes, etcd and its data, the temporary
//! directory) goes when the run ends, fails or is interrupted: every piece is owned by a
//! value whose `Drop` removes it, and an interrupt is an error that unwinds normally.
pub mod agent;
pub mod etcd_load;
pub mod observe;
pub mod simulation;
pub mod topology;

pub use simulation::{run, Options, Report};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Setup(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("interrupted")]
    Interrupted,
    #[error("netlink: {0}")]
    Net(#[from] cni_net::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
