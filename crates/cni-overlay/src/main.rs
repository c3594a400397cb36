//! cni-overlay-agent: one per node. See `cni_overlay` and docs/multi-host.md.
//!
//! ```text
//! cni-overlay-agent --etcd-endpoints http://192.0.2.11:2379 --iface eth0 --node node-a
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;

use cni_cli::clap::error::ErrorKind;
use cni_cli::tracing;
use cni_overlay::config::{Args, Config};

fn main() -> ExitCode {
    let args: Args = cni_cli::parse();
    if let Err(e) = cni_cli::init_logging("cni-overlay-agent", &args.log) {
        eprintln!("cni-overlay-agent: {e}");
        return ExitCode::FAILURE;
    }
    // Flags that parse but do not fit together are refused as clap refuses the others:
    // the message, the usage, status 2.
    let config = Config::from_args(args)
        .unwrap_or_else(|e| cni_cli::command::<Args>().error(ErrorKind::ValueValidation, e).exit());
    let stop = cni_os::signal::stop_on_termination();
    match cni_overlay::agent::run(&config, stop) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "cannot go on");
            ExitCode::FAILURE
        }
    }
}
