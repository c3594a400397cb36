//! Ctrl-C and SIGTERM stop the run between two plugin calls, so the namespaces' guards
//! still remove everything the run made (a signal's default action would leave the
//! `cnk-*` namespaces behind).

use crate::error::{BenchError, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The flag cni-os raises on SIGINT or SIGTERM, once the handlers are installed.
static STOP: OnceLock<&'static AtomicBool> = OnceLock::new();

pub fn install_handlers() {
    STOP.get_or_init(cni_os::signal::stop_on_termination);
}

/// An error once a stop was asked for.
pub fn check() -> Result<()> {
    if interrupted() {
        return Err(BenchError::Interrupted);
    }
    Ok(())
}

pub fn interrupted() -> bool {
    STOP.get().is_some_and(|flag| flag.load(Ordering::SeqCst))
}
