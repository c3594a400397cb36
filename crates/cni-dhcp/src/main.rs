//! dhcp: the IPAM plugin a runtime runs (CNI_COMMAND in the environment), and, as
//! `dhcp daemon [flags]`, the daemon that holds the leases the plugin asks it for, as the
//! reference's `dhcp` binary. See `cni_dhcp::cli` for the flags.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

use cni_dhcp::cli;

fn main() -> ExitCode {
    // A runtime's call is the plugin whatever the arguments (runtimes pass none).
    if std::env::var_os("CNI_COMMAND").is_some() {
        cni_sdk::run(&cni_dhcp::Dhcp);
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some("daemon") => cli::run(&cli::parse_daemon(args[0].clone(), &args[2..])),
        // --help, --version, --completions; anything else is refused with status 2.
        Some(_) => {
            cli::parse(args);
            ExitCode::SUCCESS
        }
        // No arguments: the plugin, which answers a call without CNI_COMMAND with its
        // name and versions, as every plugin does.
        None => cni_sdk::run(&cni_dhcp::Dhcp),
    }
}
