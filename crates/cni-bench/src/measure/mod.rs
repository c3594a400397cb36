//! The one place the benchmarks read what a run cost: CPU time and memory of processes
//! (`process`), the phase accounts of etcd-ipam-bench built on it (`cpu`), and etcd's own
//! request counters (`etcd`).

pub mod cpu;
pub mod etcd;
pub mod process;
