//! The records of container name resolution, shared by the `dnsname` plugin (which writes
//! them) and the `cni-dnsd` resolver (which serves them).
//!
//! Everything here is synchronous and small: the plugin is a short-lived process in the
//! multi-call binary and must not pull in an async runtime or DNS wire code. The resolver
//! reads the same files, so a resolver that restarts (or is killed) serves exactly what the
//! plugins left on disk, and a record removed on disk is gone from the next answer.
//!
//! Layout under the state directory (root only: directories 0700, files 0600):
//! ```text
//! <state>/dnsd.sock                       the resolver's control socket
//! <state>/dnsd.pid, dnsd.log, start.lock  the resolver started on demand
//! <state>/networks/<network>/network.json its domain, gateway addresses, upstream servers
//! <state>/networks/<network>/hosts/<hex(ifname)>_<containerID>.json   one per attachment
//! ```

pub mod control;
pub mod names;
pub mod store;

pub use names::{validate_domain, validate_host_name, NameError};
pub use store::{HostRecord, NetworkRecord, StateDir, StoreError};

/// Where records live unless a configuration says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/run/cni/dnsname";
/// The domain a network gets when its configuration names none (the reference's default).
pub const DEFAULT_DOMAIN: &str = "dns.podman";
/// The resolver's name in `CNI_PATH` and next to the plugin binary.
pub const RESOLVER_BINARY: &str = "cni-dnsd";

/// Bounds on what one attachment may register: names come from pod authors.
pub const MAX_ALIASES: usize = 64;
pub const MAX_ADDRESSES: usize = 16;
/// Bounds on what the resolver loads, so a full disk of junk cannot exhaust its memory.
pub const MAX_NETWORKS: usize = 1024;
pub const MAX_HOSTS_PER_NETWORK: usize = 16384;
pub const MAX_UPSTREAMS: usize = 8;
/// No record file is larger than this (a host with every bound at its maximum fits).
pub const MAX_RECORD_FILE: u64 = 64 * 1024;
