//! IPAM plugins.

pub mod host_local;
pub mod static_ipam;
