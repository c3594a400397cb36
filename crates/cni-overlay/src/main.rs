//! cni-overlay-agent: one per node. See `cni_overlay` and docs/multi-host.md.
//!
//! ```text
//! cni-overlay-agent --etcd-endpoints http://192.0.2.11:2379 --iface eth0 --node node-a
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;

use cni_overlay::config::{Config, USAGE};

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
    let stop = cni_os::signal::stop_on_termination();
    match cni_overlay::agent::run(&config, stop) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-overlay-agent: {e}");
            ExitCode::FAILURE
        }
    }
}
