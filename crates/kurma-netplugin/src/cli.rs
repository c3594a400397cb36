//! The `kurma-netplugin` binary: `/opt/network/setup`, `/opt/network/add` and
//! `/opt/network/del` are links to it, and it does what its name says (or its first
//! argument: `kurma-netplugin add NETNS UUID eth0`).
//!
//! Every executable reads the network's `container_networks` entry on stdin. On success
//! `setup` and `del` print nothing and `add` prints the Kurma result; all exit 0. On
//! failure each prints a CNI error object (`code`, `msg` naming the network, `details`) on
//! stdout and the same in words on stderr, and exits 1. `kurma-netplugin pause` is the
//! image's long-lived main process: it waits for SIGTERM.
//!
//! The arguments are read by hand, not with clap: Kurma picks the verb by the name the
//! binary runs under (`/opt/network/add`), passes bare positional arguments that may look
//! like anything, and reads every failure, a wrong call included, as a CNI error object on
//! stdout with status 1; clap would answer a bad call with its own text and status 2.

use crate::daemon;
use crate::ops::{self, Network, Target};
use crate::settings::{Settings, SETUP_QUERY_TIME_LIMIT};
use cni_types::{CniError, ErrorCode};
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage (as /opt/network/<verb>, or kurma-netplugin <verb> ...):
  setup                              validate the network on stdin, start its daemons
  add NETNS_PATH CONTAINER_UUID [IF] attach the container, print the Kurma result
  del NETNS_PATH CONTAINER_UUID [IF] detach the container (idempotent)
  pause                              wait for SIGTERM (the plugin container's main process)
The network's container_networks entry is read on stdin.";

/// Runs the binary with `args` (`argv`, the program name first).
pub fn main(args: &[String]) -> ExitCode {
    let invoked_as = args.first().map(|a| basename(a)).unwrap_or_default();
    let (verb, rest) = match invoked_as.as_str() {
        "setup" | "add" | "del" | "pause" => (invoked_as.as_str(), &args[1.min(args.len())..]),
        _ => match args.get(1) {
            Some(verb) => (verb.as_str(), &args[2..]),
            None => ("", &args[0..0]),
        },
    };
    match verb {
        "pause" => pause(),
        "setup" | "add" | "del" => finish(verb, run(verb, rest)),
        "--help" | "-h" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("kurma-netplugin: unknown verb {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn basename(path: &str) -> String {
    Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Runs one verb; `Some(output)` is what a successful `add` prints.
fn run(verb: &str, args: &[String]) -> Result<Option<String>, CniError> {
    let settings = Settings::from_env();
    // Arguments first: a wrong call is refused before anything is read or started.
    let target = match verb {
        "setup" if !args.is_empty() => {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("setup takes no arguments, got {}", args.len()),
            ))
        }
        "setup" => None,
        _ => Some(Target::from_args(args)?),
    };
    let mut stdin = Vec::new();
    std::io::stdin().read_to_end(&mut stdin).map_err(|e| CniError::io(format!("reading stdin: {e}")))?;
    let mut network = Network::load(&stdin, &settings)?;
    match target {
        None => {
            network.cni =
                network.cni.clone().with_timeout(SETUP_QUERY_TIME_LIMIT.min(settings.plugin_time_limit));
            setup(&network, &settings).map(|()| None)
        }
        Some(target) if verb == "add" => {
            let result = ops::add(&network, &target)?;
            Ok(Some(serde_json::to_string(&result).expect("a result always serialises")))
        }
        Some(target) => ops::del(&network, &target).map(|()| None),
    }
}

/// `setup`: validate, make the state directory, start (or find running) what the network
/// needs in the background, then ask the plugin for its STATUS. Safe to run again at any
/// time: it re-validates and restarts only what is not running.
fn setup(network: &Network, settings: &Settings) -> Result<(), CniError> {
    let has_status = ops::validate(network)?;
    std::fs::create_dir_all(settings.cache_dir()).map_err(|e| {
        ops::in_network(
            network.name(),
            CniError::io(format!("creating {}: {e}", settings.cache_dir().display())),
        )
    })?;
    if let Some(socket) = daemon::needs_daemon(network) {
        daemon::ensure_dhcp_daemon(network, settings, &socket)?;
    }
    if has_status {
        ops::status(network)?;
    }
    Ok(())
}

fn finish(verb: &str, outcome: Result<Option<String>, CniError>) -> ExitCode {
    match outcome {
        Ok(output) => {
            if let Some(text) = output {
                let mut stdout = std::io::stdout().lock();
                if writeln!(stdout, "{text}").and_then(|()| stdout.flush()).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            println!("{}", err.to_json());
            eprintln!("kurma-netplugin {verb}: {err} (CNI error code {})", err.code);
            ExitCode::FAILURE
        }
    }
}

/// The plugin container's main process: nothing to do but stay alive until told to stop.
fn pause() -> ExitCode {
    cni_os::signal::idle_until_terminated()
}
