//! What cni-bench's programs share as a library: `cni-bench` (the plugins against the Go
//! reference), `etcd-ipam-bench` (etcd-ipam from many nodes) and `overlay-scale` (the
//! overlay agent at 10 to 250 simulated nodes), each a binary of this crate.
//!
//! - [`measure`]: CPU time, memory and etcd's load, read the same way by every benchmark;
//! - [`overlay_scale`]: the overlay simulation (its tests drive it as a library).

pub mod measure;
pub mod overlay_scale;
