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

use kurma_net::{Host, HostOptions, NetworkConfig};

const USAGE: &str = "usage: kurma-net --state-dir DIR --config FILE [--runtime PATH] [--limit-secs N] \
[--host-netns PATH] [--prefix NAME] [--ca-file PEM] start-plugins | stop-plugins | attach UUID NETNS [NETWORK...] | detach UUID | status";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
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

fn run(args: Vec<String>) -> Result<String, String> {
    let mut state_dir = None;
    let mut config = None;
    let mut options = HostOptions::new("");
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--state-dir" => state_dir = Some(PathBuf::from(value("--state-dir")?)),
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            "--runtime" => options.runtime = PathBuf::from(value("--runtime")?),
            "--host-netns" => options.host_netns = Some(PathBuf::from(value("--host-netns")?)),
            "--prefix" => options.container_prefix = value("--prefix")?,
            "--ca-file" => options.ca_file = Some(PathBuf::from(value("--ca-file")?)),
            "--limit-secs" => {
                let secs: u64 =
                    value("--limit-secs")?.parse().map_err(|_| "--limit-secs takes whole seconds")?;
                options.limit = Duration::from_secs(secs);
            }
            "-h" | "--help" => return Ok(USAGE.to_string()),
            _ => rest.push(arg),
        }
    }
    options.state_dir = state_dir.ok_or_else(|| format!("--state-dir is required\n{USAGE}"))?;
    let config = config.ok_or_else(|| format!("--config is required\n{USAGE}"))?;
    let config = NetworkConfig::load(&config).map_err(|err| err.to_string())?;
    let host = Host::new(config, options).map_err(|err| err.to_string())?;
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let pretty = |value: serde_json::Value| serde_json::to_string_pretty(&value).expect("JSON serializes");
    match rest.as_slice() {
        ["start-plugins"] => {
            let started = host.start_plugins().map_err(|err| err.to_string())?;
            let lines: Vec<String> = started.iter().map(|(name, how)| format!("{name}: {how:?}")).collect();
            Ok(lines.join("\n"))
        }
        ["stop-plugins"] => host.stop_plugins().map(|()| String::new()).map_err(|err| err.to_string()),
        ["attach", uuid, netns, networks @ ..] => {
            let networks: Vec<String> = networks.iter().map(|s| s.to_string()).collect();
            let selected = (!networks.is_empty()).then_some(networks.as_slice());
            let record = host.attach(uuid, netns.as_ref(), selected).map_err(|err| err.to_string())?;
            Ok(pretty(serde_json::to_value(record).expect("records serialize")))
        }
        ["detach", uuid] => host.detach(uuid).map(|()| String::new()).map_err(|err| err.to_string()),
        ["status"] => host.status().map(pretty).map_err(|err| err.to_string()),
        _ => Err(USAGE.to_string()),
    }
}
