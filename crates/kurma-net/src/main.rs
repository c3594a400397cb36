//! `kurma-net`: the host side of Kurma's networking as a command.
//!
//! ```text
//! kurma-net --state-dir DIR --config FILE [--runtime runc] [--limit-secs 60]
//!           [--host-netns PATH] [--prefix kurma-net] [--ca-file PEM] COMMAND
//!   start-plugins                 fetch images, start/re-adopt plugin containers, run setup
//!   stop-plugins                  remove the plugin containers
//!   attach UUID NETNS [NETWORK…]  add the container to the networks (default: all); prints
//!                                 its network metadata as JSON
//!   detach UUID                   del from every network the container is attached to
//!   status                        plugins and attached containers, as JSON
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kurma_net::{Host, HostOptions, NetworkConfig};

/// The host side of Kurma's networking: netplugin containers, and containers attached to
/// their networks.
#[derive(Debug, Parser)]
#[command(name = "kurma-net", version)]
struct Args {
    /// The directory of kurma-net's state (plugin bundles, attachments, the runtime's root)
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// The Kurma configuration whose `container_networks` to run
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The OCI runtime running the plugin containers [default: runc]
    #[arg(long, value_name = "PATH")]
    runtime: Option<PathBuf>,
    /// How long one plugin executable may run, in whole seconds [default: 60]
    #[arg(long, value_name = "N")]
    limit_secs: Option<u64>,
    /// The host's network namespace, when it is not this process's
    #[arg(long, value_name = "PATH")]
    host_netns: Option<PathBuf>,
    /// What the plugin containers' names begin with [default: kurma-net]
    #[arg(long = "prefix", value_name = "NAME")]
    container_prefix: Option<String>,
    /// A CA certificate (PEM) trusted besides the built-in roots when fetching images
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Fetch the images, start (or re-adopt) the plugin containers and run setup
    StartPlugins,
    /// Remove the plugin containers
    StopPlugins,
    /// Add a container to the networks (default: all); prints its network metadata as JSON
    Attach { uuid: String, netns: PathBuf, networks: Vec<String> },
    /// Delete a container from every network it is attached to
    Detach { uuid: String },
    /// The plugins and the attached containers, as JSON
    Status,
}

impl Args {
    /// The host options: what was given, the library's defaults for the rest.
    fn host_options(&self) -> HostOptions {
        let mut options = HostOptions::new(&self.state_dir);
        if let Some(runtime) = &self.runtime {
            options.runtime = runtime.clone();
        }
        if let Some(secs) = self.limit_secs {
            options.limit = Duration::from_secs(secs);
        }
        if let Some(prefix) = &self.container_prefix {
            options.container_prefix = prefix.clone();
        }
        options.host_netns = self.host_netns.clone();
        options.ca_file = self.ca_file.clone();
        options
    }
}

fn main() -> ExitCode {
    let args: Args = cni_cli::parse();
    match run(args) {
        Ok(output) => {
            if !output.is_empty() {
                // A closed pipe (`kurma-net status | head`) is not an error of ours.
                let _ = writeln!(std::io::stdout(), "{output}");
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("kurma-net: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<String, String> {
    let config = NetworkConfig::load(&args.config).map_err(|err| err.to_string())?;
    let host = Host::new(config, args.host_options()).map_err(|err| err.to_string())?;
    let pretty = |value: serde_json::Value| serde_json::to_string_pretty(&value).expect("JSON serializes");
    match args.command {
        Verb::StartPlugins => {
            let started = host.start_plugins().map_err(|err| err.to_string())?;
            let lines: Vec<String> = started.iter().map(|(name, how)| format!("{name}: {how:?}")).collect();
            Ok(lines.join("\n"))
        }
        Verb::StopPlugins => host.stop_plugins().map(|()| String::new()).map_err(|err| err.to_string()),
        Verb::Attach { uuid, netns, networks } => {
            let selected = (!networks.is_empty()).then_some(networks.as_slice());
            let record = host.attach(&uuid, &netns, selected).map_err(|err| err.to_string())?;
            Ok(pretty(serde_json::to_value(record).expect("records serialize")))
        }
        Verb::Detach { uuid } => host.detach(&uuid).map(|()| String::new()).map_err(|err| err.to_string()),
        Verb::Status => host.status().map(pretty).map_err(|err| err.to_string()),
    }
}
