//! The plugins' integration tests, one module per plugin or concern, in one test binary:
//! each module was a binary of its own before. `common` installs the multi-call binary
//! into a CNI bin directory and runs plugins from it the way a runtime does.
//!
//! Not here: `kernel_features.rs` and `kernel_bridge_vlan.rs`, which run their own
//! binary's ignored tests inside a QEMU VM (`tools/kernel-rig`) and so stay binaries of
//! their own.

mod common;

mod bad_input;
mod bandwidth;
mod bridge;
mod damaged_state;
mod firewall;
mod firewalld;
mod gc_property;
mod go_cased_keys;
mod host_device;
mod host_local;
mod kill9;
mod loopback;
mod macvlan;
mod masquerade;
mod portmap;
mod ptp;
mod reference_adoption;
mod sbr;
mod slaac;
mod static_ipam;
mod tap;
mod tuning;
