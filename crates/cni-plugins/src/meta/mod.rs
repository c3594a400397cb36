//! Meta plugins: chained after an interface plugin, they act on its result.
pub mod bandwidth;
pub mod dnsname;
pub mod firewall;
pub mod portmap;
pub mod sbr;
pub mod tuning;
pub mod vrf;
