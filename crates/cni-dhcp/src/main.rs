//! dhcp: the IPAM plugin a runtime runs (CNI_COMMAND in the environment), and, as
//! `dhcp daemon [flags]`, the daemon that holds the leases the plugin asks it for, as the
//! reference's `dhcp` binary. See `cni_dhcp::cli` for the flags.

use std::process::ExitCode;

use cni_dhcp::cli;

fn main() -> ExitCode {
    cni_metrics::daemon::dispatch::<cli::Cli>(
        "daemon",
        || cni_sdk::run(&cni_dhcp::Dhcp),
        |args| cli::run(&cli::parse_daemon(args)),
    )
}
