//! `cni-bench`'s integration tests in one binary: its command line, and its CI runs (the
//! smoke run of every workload and the soak) end to end as root.
#![forbid(unsafe_code)]

mod cli;
mod smoke;
mod soak;
