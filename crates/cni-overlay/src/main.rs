//! cni-overlay-agent: one per node. See `cni_overlay` and docs/multi-host.md.
//!
//! ```text
//! cni-overlay-agent --etcd-endpoints http://192.0.2.11:2379 --iface eth0 --node node-a
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use cni_overlay::config::{Config, USAGE};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let config = match Config::parse(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("cni-overlay-agent: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    match cni_overlay::agent::run(&config, &STOP) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-overlay-agent: {e}");
            ExitCode::FAILURE
        }
    }
}
