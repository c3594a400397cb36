//! cni-overlay-agent: one per node. See `cni_overlay` and docs/multi-host.md.
//!
//! ```text
//! cni-overlay-agent --etcd-endpoints http://192.0.2.11:2379 --iface eth0 --node node-a
//! ```

use std::process::ExitCode;

use cni_cli::clap::error::ErrorKind;
use cni_overlay::config::{Args, Config};

fn main() -> ExitCode {
    let args: Args = cni_cli::parse();
    let log = args.log.clone();
    cni_metrics::daemon::main("cni-overlay-agent", &log, || {
        // Flags that parse but do not fit together are refused as clap refuses the others:
        // the message, the usage, status 2.
        let config = Config::from_args(args)
            .unwrap_or_else(|e| cni_cli::command::<Args>().error(ErrorKind::ValueValidation, e).exit());
        let stop = cni_os::signal::stop_on_termination();
        cni_overlay::agent::run(&config, stop)
    })
}
