//! What a process does on SIGINT and SIGTERM. Installing a handler is the one thing here
//! std cannot do; each handler only does what is async-signal-safe (an atomic store, or
//! `_exit`).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

extern "C" fn exit_at_once(_signal: libc::c_int) {
    // SAFETY: _exit is async-signal-safe and ends the process without running anything.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    }
}

fn install(signals: &[libc::c_int], handler: extern "C" fn(libc::c_int)) {
    for &signal in signals {
        // SAFETY: the handlers of this module only store to an atomic or call _exit, both
        // async-signal-safe; they touch no other state.
        #[allow(unsafe_code)]
        unsafe {
            libc::signal(signal, handler as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

/// From now on SIGINT and SIGTERM only raise the returned flag, which the process's loops
/// check to stop in order (the same flag for every call).
pub fn stop_on_termination() -> &'static AtomicBool {
    install(&[libc::SIGINT, libc::SIGTERM], request_stop);
    &STOP_REQUESTED
}

/// Waits, doing nothing, until SIGTERM, SIGINT or SIGHUP ends the process with status 0
/// (a container's placeholder main process).
pub fn idle_until_terminated() -> ! {
    install(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP], exit_at_once);
    loop {
        // SAFETY: pause has no preconditions; it returns after a handled signal.
        #[allow(unsafe_code)]
        unsafe {
            libc::pause();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_termination_signal_raises_the_flag_instead_of_ending_the_process() {
        let stop = super::stop_on_termination();
        crate::process::kill(std::process::id(), crate::process::Signal::TERM).unwrap();
        // Delivered to some thread of ours; the flag is set before kill returns for a
        // signal to the calling process when this thread can take it, else very soon.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "the flag was never raised");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
