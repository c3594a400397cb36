//! cni-types' integration tests, one binary: each former test file is a module.

mod spec_examples;
