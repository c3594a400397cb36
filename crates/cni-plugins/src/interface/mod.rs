//! Interface plugins: they create or configure the container's interface.

pub mod bridge;
pub mod dummy;
pub mod host_device;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;
pub mod ptp;
pub mod tap;
pub mod vlan;
