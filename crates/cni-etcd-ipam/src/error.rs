//! Errors of etcd-ipam and their CNI codes: 7 for configuration, 6 for undecodable input,
//! 11 (try again later) for etcd being unreachable, the pool being exhausted or a race lost
//! too many times, 999 for anything etcd refused or stored that makes no sense.

use cni_sdk::CniError;

#[derive(Debug, thiserror::Error)]
pub enum EtcdIpamError {
    #[error("etcd-ipam: invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("etcd-ipam: failed to decode {0}")]
    Decode(String),
    #[error("etcd-ipam: {0}; nothing was allocated")]
    Unavailable(String),
    #[error("etcd-ipam: no free address in pools {pools} of network {network}")]
    Exhausted { network: String, pools: String },
    #[error("etcd-ipam: lost {0} races for a block in a row; try again")]
    Contended(usize),
    #[error("etcd-ipam: {0}")]
    Store(String),
    #[error("etcd-ipam: {0}")]
    CheckFailed(String),
    /// The node agent's error, as it worded and coded it.
    #[error("{msg}")]
    FromAgent { code: u32, msg: String },
}

impl EtcdIpamError {
    pub fn cni_code(&self) -> u32 {
        match self {
            EtcdIpamError::InvalidConfig(_) => 7,
            EtcdIpamError::Decode(_) => 6,
            EtcdIpamError::Unavailable(_) | EtcdIpamError::Exhausted { .. } | EtcdIpamError::Contended(_) => {
                11
            }
            EtcdIpamError::Store(_) | EtcdIpamError::CheckFailed(_) => 999,
            EtcdIpamError::FromAgent { code, .. } => *code,
        }
    }
}

impl From<cni_etcd::Error> for EtcdIpamError {
    fn from(err: cni_etcd::Error) -> EtcdIpamError {
        match err {
            cni_etcd::Error::Unreachable { .. } => EtcdIpamError::Unavailable(err.to_string()),
            cni_etcd::Error::Config(msg) => EtcdIpamError::InvalidConfig(msg),
            other => EtcdIpamError::Store(other.to_string()),
        }
    }
}

impl From<EtcdIpamError> for CniError {
    fn from(err: EtcdIpamError) -> CniError {
        CniError::new(err.cni_code(), err.to_string())
    }
}
