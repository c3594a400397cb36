//! IPAM plugins.

pub mod host_local;
pub mod slaac;
pub mod static_ipam;
