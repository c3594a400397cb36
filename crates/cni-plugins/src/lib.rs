//! Every cni-rs plugin, as modules built into one multi-call binary.

pub mod ipam;
