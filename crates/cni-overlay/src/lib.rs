//! cni-overlay: the node agent of a VXLAN overlay across nodes (see docs/multi-host.md).
//!
//! Each node leases one pod subnet of the cluster network in etcd (a key bound to an etcd
//! lease that the agent keeps alive), records its underlay address and VTEP MAC there, and
//! programs, for every other node's record, a route + permanent neighbour + FDB entry on its
//! VXLAN device (or, with `--backend direct|auto`, a route via the peer's underlay address;
//! with `--backend wireguard`, a WireGuard peer and a route on the node's WireGuard device,
//! see [`wgplane`] and [`wgkey`]). A watch on the records keeps the entries in step with the
//! cluster.

pub mod agent;
pub mod cniconf;
pub mod config;
pub mod dataplane;
pub mod lease;
pub mod metrics;
pub mod peer;
pub mod wgkey;
pub mod wgplane;

/// What went wrong, for the agent's log and exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("etcd: {0}")]
    Etcd(#[from] cni_etcd::Error),
    #[error("netlink: {0}")]
    Net(#[from] cni_net::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// Every subnet of the cluster network is held by some node.
    #[error("{0}")]
    Exhausted(String),
}

pub type Result<T> = std::result::Result<T, Error>;
