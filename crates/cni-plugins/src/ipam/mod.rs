//! IPAM plugins.

pub mod dhcp;
pub mod etcd;
pub mod host_local;
pub mod slaac;
pub mod static_ipam;
