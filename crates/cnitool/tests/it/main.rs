//! cnitool's integration tests, one binary: each former test file is a module, `support`
//! what several of them share.

mod cli;
mod daily;
#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "handover")]
mod handover;
mod hostile;
mod support;
#[cfg(feature = "plugin-checks")]
mod validate;
