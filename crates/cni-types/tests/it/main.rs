//! cni-types' integration tests, one binary: each former test file is a module.
#![forbid(unsafe_code)]

mod spec_examples;
