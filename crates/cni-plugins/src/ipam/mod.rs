//! IPAM plugins.

pub mod host_local;
