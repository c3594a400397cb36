//! cni-overlay: the node agent of a VXLAN overlay across nodes (see docs/multi-host.md).
//!
//! Each node leases one pod subnet of the cluster network in etcd (a key bound to an etcd
//! lease that the agent keeps alive), records its underlay address and VTEP MAC there, and
//! programs, for every other node's record, a route + permanent neighbour + FDB entry on its
//! VXLAN device. A watch on the records keeps the entries in step with the cluster.

pub mod agent;
pub mod cniconf;
pub mod config;
pub mod dataplane;
pub mod lease;

/// What went wrong, for the agent's log and exit status.
#[derive(Debug)]
pub enum Error {
    Config(String),
    Etcd(cni_etcd::Error),
    Net(cni_net::Error),
    Io(String, std::io::Error),
    Exhausted(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(message) => write!(f, "configuration: {message}"),
            Error::Etcd(e) => write!(f, "etcd: {e}"),
            Error::Net(e) => write!(f, "netlink: {e}"),
            Error::Io(what, e) => write!(f, "{what}: {e}"),
            Error::Exhausted(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<cni_etcd::Error> for Error {
    fn from(e: cni_etcd::Error) -> Error {
        Error::Etcd(e)
    }
}

impl From<cni_net::Error> for Error {
    fn from(e: cni_net::Error) -> Error {
        Error::Net(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
