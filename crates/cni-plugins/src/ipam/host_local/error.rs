//! Errors of host-local, each mapped to a CNI error code.
//!
//! The Go reference answers every host-local failure with the generic code 999. We give each
//! failure the well-known code that tells the runtime what to do about it:
//! - 4 (invalid environment): a malformed `CNI_ARGS`;
//! - 5 (I/O): the state directory cannot be read or written;
//! - 6 (decode): stdin is not JSON of the expected shape;
//! - 7 (invalid configuration): the config or the requested addresses cannot work with it
//!   (bad ranges, a requested address outside every range or equal to the gateway);
//! - 11 (try again later): the ranges are full or the requested address is held by another
//!   attachment — both clear once other attachments are deleted or garbage-collected;
//! - 999 (internal, as the reference): the attachment already holds an address (the runtime
//!   must DEL first) or CHECK found the state differing; no well-known code fits these.
//!
//! For STATUS, the plugin wrapper reports [`HostLocalError::Exhausted`] as code 50
//! ("plugin not available"), as the spec asks for STATUS.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

/// CNI well-known error codes used here.
pub mod codes {
    pub const INVALID_ENV: u32 = 4;
    pub const IO: u32 = 5;
    pub const DECODE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const NOT_AVAILABLE: u32 = 50;
    pub const INTERNAL: u32 = 999;
}

#[derive(Debug, thiserror::Error)]
pub enum HostLocalError {
    #[error("invalid host-local configuration: {0}")]
    InvalidConfig(String),
    #[error("invalid environment: {0}")]
    InvalidEnv(String),
    #[error("failed to decode {0}")]
    Decode(String),
    #[error("host-local state {path}: {context}: {source}")]
    Io {
        path: PathBuf,
        context: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("no IP addresses available in range set: {range_set}")]
    Exhausted { range_set: String },
    #[error("requested IP address {ip} is not available in range set {range_set}")]
    RequestedUnavailable { ip: IpAddr, range_set: String },
    #[error("requested ip {ip} is {what} of range set {range_set}")]
    RequestedReserved { ip: IpAddr, what: &'static str, range_set: String },
    #[error("failed to allocate all requested IPs:{}", list(.0))]
    RequestedNotAllocated(Vec<IpAddr>),
    #[error("{ip} has been allocated to {container_id}, duplicate allocation is not allowed")]
    AlreadyAllocated { ip: IpAddr, container_id: String },
    #[error("host-local: {0}")]
    CheckFailed(String),
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter().map(|ip| format!(" {ip}")).collect()
}

impl HostLocalError {
    /// The CNI error code for this failure (see the module documentation).
    pub fn cni_code(&self) -> u32 {
        match self {
            HostLocalError::InvalidConfig(_)
            | HostLocalError::RequestedReserved { .. }
            | HostLocalError::RequestedNotAllocated(_) => codes::INVALID_CONFIG,
            HostLocalError::InvalidEnv(_) => codes::INVALID_ENV,
            HostLocalError::Decode(_) => codes::DECODE,
            HostLocalError::Io { .. } => codes::IO,
            HostLocalError::Exhausted { .. } | HostLocalError::RequestedUnavailable { .. } => {
                codes::TRY_AGAIN_LATER
            }
            HostLocalError::AlreadyAllocated { .. } | HostLocalError::CheckFailed(_) => codes::INTERNAL,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, context: &'static str, source: io::Error) -> Self {
        HostLocalError::Io { path: path.into(), context, source }
    }
}
