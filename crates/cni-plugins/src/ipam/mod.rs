//! IPAM plugins.

pub mod dhcp;
pub mod host_local;
pub mod slaac;
pub mod static_ipam;
