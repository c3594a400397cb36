//! The long-running daemons' one start-up: cni-dnsd, `dhcp daemon`, `etcd-ipam agent` and
//! cni-overlay-agent each set up logging, take their listening socket (systemd's or a
//! private one), write a pid file, start the metrics endpoint and announce its address
//! through these functions, so that they do it in one way and one order; `dhcp` and
//! `etcd-ipam`, which are plugins and daemons in one binary, choose between the two with
//! [`dispatch`].
//!
//! Why in this crate: it is the one crate that only the daemons link. The plugin multi-call
//! binary links neither it nor cni-cli, so the start-up (clap, tracing, the metrics server)
//! never enters a plugin exec there; putting it in cni-cli instead would make cnitool and
//! the Kurma binaries, which link cni-cli, compile the metrics server. The announced line
//! itself is cni-cli's ([`cni_cli::metrics_line`]): the test kit that reads it depends on
//! cni-cli, not on this crate.

use std::ffi::OsString;
use std::fmt::Display;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::ExitCode;

use cni_cli::{tracing, LogArgs};
use cni_os::fs::Durability;
use prometheus_client::registry::Registry;

/// A daemon's `main` after its flags are parsed: logging set up as `log` says, then `run`;
/// an error it ends with is logged as `PROGRAM stopped` with the error, and the status is
/// 1. Logging that cannot be set up is said on stderr, with the same status.
pub fn main<E: Display>(
    program: &'static str,
    log: &LogArgs,
    run: impl FnOnce() -> Result<(), E>,
) -> ExitCode {
    if let Err(e) = cni_cli::init_logging(program, log) {
        eprintln!("{program}: {e}");
        return ExitCode::FAILURE;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{program} stopped");
            ExitCode::FAILURE
        }
    }
}

/// The daemon's control socket: the one systemd passed (socket activation), else a new
/// one at `path`, 0600 in a 0700 directory whatever the umask (whoever can talk to a daemon
/// can make it act for any container; see [`cni_os::socket::bind_private`]). An error names
/// `path`.
pub fn listener(path: &Path) -> io::Result<UnixListener> {
    let taken = cni_os::socket::activated_listener().and_then(|passed| match passed {
        Some(listener) => Ok(listener),
        None => cni_os::socket::bind_private(path),
    });
    taken.map_err(|e| io::Error::new(e.kind(), format!("listen on {}: {e}", path.display())))
}

/// Writes this process's pid and a newline to `path` (when a pid file was asked for),
/// atomically: a reader sees the old pid or the new one, never a half-written file.
pub fn write_pid_file(path: Option<&Path>) -> io::Result<()> {
    let Some(path) = path else { return Ok(()) };
    let pid = format!("{}\n", std::process::id());
    cni_os::fs::write_atomic(path, pid.as_bytes(), 0o644, Durability::Unsynced)
        .map_err(|e| io::Error::new(e.kind(), format!("pid file {}: {e}", path.display())))
}

/// When `address` is given: serves the metrics `register` puts in a registry on `/metrics`
/// and `health` on `/healthz` there ([`crate::serve`]), and logs [`cni_cli::metrics_line`]
/// with the address bound (the port the kernel chose for `IP:0`). Returns that address. An
/// error names `address`.
pub fn serve_metrics(
    address: Option<SocketAddr>,
    register: impl FnOnce(&mut Registry),
    health: impl Fn() -> Result<String, String> + Send + Sync + 'static,
) -> io::Result<Option<SocketAddr>> {
    let Some(address) = address else { return Ok(None) };
    let mut registry = Registry::default();
    register(&mut registry);
    let bound = crate::serve(address, registry, Box::new(health))
        .map_err(|e| io::Error::new(e.kind(), format!("metrics address {address}: {e}")))?;
    tracing::info!("{}", cni_cli::metrics_line(bound));
    Ok(Some(bound))
}

/// Which side of a plugin-and-daemon binary (`dhcp` and `dhcp daemon`, `etcd-ipam` and
/// `etcd-ipam agent`) a command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Role {
    /// The daemon: its own argument list, the program name then what follows the
    /// sub-command (for the daemon's own parser).
    Daemon(Vec<OsString>),
    /// The plugin: a runtime's call (CNI_COMMAND set, or no arguments at all; a plugin run
    /// without CNI_COMMAND answers with its name and versions).
    Plugin,
    /// Anything else is for the program's own parser: `--help`, `--version`,
    /// `--completions SHELL`, or an error (status 2).
    CommandLine(Vec<OsString>),
}

/// The [`Role`] of `args` (the program name first) for a binary whose daemon is
/// `sub_command`. The sub-command comes first, as in the reference's `dhcp`: a daemon
/// started from a plugin's environment (CNI_COMMAND inherited) is still the daemon.
pub fn role(sub_command: &str, mut args: Vec<OsString>, cni_command: bool) -> Role {
    match args.get(1) {
        Some(first) if *first == *sub_command => {
            args.remove(1);
            Role::Daemon(args)
        }
        // Runtimes pass no arguments; any they do pass do not make it something else.
        _ if cni_command => Role::Plugin,
        None => Role::Plugin,
        Some(_) => Role::CommandLine(args),
    }
}

/// `main` of a plugin-and-daemon binary: the [`role`] of this process's command line, then
/// `daemon` with the daemon's argument list, or `plugin`, or the program's own parser `C`
/// (whose sub-command list names the daemon for `--help`), which exits on everything it
/// accepts; were it to return, the call is the plugin's.
pub fn dispatch<C: cni_cli::clap::Parser>(
    sub_command: &str,
    plugin: impl FnOnce() -> ExitCode,
    daemon: impl FnOnce(Vec<OsString>) -> ExitCode,
) -> ExitCode {
    let cni_command = std::env::var_os("CNI_COMMAND").is_some();
    match role(sub_command, std::env::args_os().collect(), cni_command) {
        Role::Daemon(args) => daemon(args),
        Role::Plugin => plugin(),
        Role::CommandLine(args) => {
            cni_cli::parse_from::<C, _>(args);
            plugin()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_sub_command_is_the_daemon_whatever_the_environment() {
        for cni_command in [false, true] {
            assert_eq!(
                role("daemon", args(&["dhcp", "daemon", "-socketpath", "/s"]), cni_command),
                Role::Daemon(args(&["dhcp", "-socketpath", "/s"]))
            );
        }
    }

    #[test]
    fn a_runtimes_call_or_no_arguments_is_the_plugin() {
        assert_eq!(role("agent", args(&["etcd-ipam"]), false), Role::Plugin);
        assert_eq!(role("agent", args(&["etcd-ipam"]), true), Role::Plugin);
        assert_eq!(role("agent", args(&["etcd-ipam", "serve"]), true), Role::Plugin);
    }

    #[test]
    fn other_arguments_go_to_the_programs_parser() {
        assert_eq!(
            role("agent", args(&["etcd-ipam", "--help"]), false),
            Role::CommandLine(args(&["etcd-ipam", "--help"]))
        );
        // Only the first argument names the daemon.
        assert_eq!(
            role("daemon", args(&["dhcp", "--version", "daemon"]), false),
            Role::CommandLine(args(&["dhcp", "--version", "daemon"]))
        );
    }

    #[test]
    fn the_pid_file_holds_the_pid_and_is_replaced_whole() {
        let temp = tempfile::Builder::new().prefix("dmn-pid").tempdir().unwrap();
        let dir = temp.path();
        let path = dir.join("daemon.pid");
        std::fs::write(&path, "999999999 and a stale tail\n").unwrap();
        write_pid_file(Some(&path)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
        write_pid_file(None).unwrap();
        let refused = write_pid_file(Some(&dir.join("missing/daemon.pid"))).unwrap_err();
        assert!(refused.to_string().contains("missing/daemon.pid"), "{refused}");
    }
}
