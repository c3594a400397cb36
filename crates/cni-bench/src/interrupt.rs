//! Ctrl-C and SIGTERM stop the run between two plugin calls, so the namespaces' guards
//! still remove everything the run made (a signal's default action would leave the
//! `cnk-*` namespaces behind).

use crate::error::{BenchError, Result};
use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn install_handlers() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// An error once a stop was asked for.
pub fn check() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(BenchError::Interrupted);
    }
    Ok(())
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
