//! Interface plugins: they create or configure the container's interface.

pub mod bridge;
pub mod dummy;
pub mod ipvlan;
pub mod loopback;
pub mod ptp;
pub mod vlan;
