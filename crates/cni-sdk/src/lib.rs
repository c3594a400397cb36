//! The SDK a CNI plugin is written with.
//!
//! A plugin implements [`Plugin`] and calls [`run`] from `main`. The SDK reads the CNI_*
//! environment and stdin, validates them exactly as the reference does (the table in
//! `docs/compatibility.md`), dispatches the verb, prints the result converted to the
//! request's `cniVersion`, and turns every failure — a panic included — into an error JSON on
//! stdout with exit code 1. Logs go to stderr only.
//!
//! [`delegate`] runs another plugin (an IPAM plugin) with the same environment, with a
//! guard that deletes a delegated ADD again if the upper plugin's ADD fails later.

pub mod args;
pub mod catalog;
pub mod config;
pub mod delegate;
mod gc;
pub mod keys;
mod request;
mod skel;

pub use cni_types::{Attachment, CniError, CniResult, ErrorCode, Version, VersionInfo};
pub use gc::{GcErrors, GcFailure};
pub use request::{Command, Request};
pub use skel::{run, run_with, Environment};

/// What a plugin implements. GC and STATUS default to "nothing to do / ready", which is
/// right for plugins that keep no state and depend on nothing.
pub trait Plugin {
    /// Sets up the attachment and returns what it made.
    fn add(&self, req: &Request) -> Result<CniResult, CniError>;
    /// Tears the attachment down. Must succeed when it is already gone.
    fn del(&self, req: &Request) -> Result<(), CniError>;
    /// Verifies that the attachment is still as ADD left it.
    fn check(&self, req: &Request) -> Result<(), CniError>;
    /// Releases whatever the plugin holds for attachments not in `req.valid_attachments()`.
    fn gc(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    /// Whether the plugin is ready to take ADDs.
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    /// The versions the plugin speaks.
    fn version_info(&self) -> VersionInfo {
        VersionInfo::all()
    }
    /// One line about the plugin, printed to stderr when it is run without CNI_COMMAND.
    fn about(&self) -> String {
        String::from("a CNI plugin built with cni-rs")
    }
}
