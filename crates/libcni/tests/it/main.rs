//! libcni's integration tests, one binary: each former test file is a module, `support` the
//! rig several of them share.

mod bad_input_chain;
mod chain;
mod exec;
mod gc_status;
mod interop_go;
mod interop_go_devices;
mod parallel;
mod support;
mod versions;
