//! cni-sdk's integration tests, one binary: each former test file is a module.

mod bad_input;
mod delegate_in_process;
mod panic;
mod support;
mod trace;
