//! The benchmarks' integration tests in one binary: `cni-bench`'s command line and its CI
//! runs (the smoke run of every workload and the soak), `etcd-ipam-bench` end to end, and
//! `overlay-scale`'s command line and a small simulation, as root.

mod cli;
mod etcd_ipam_bench;
mod overlay_scale;
mod smoke;
mod soak;
