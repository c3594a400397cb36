//! The `dhcp` binary's command line: `dhcp daemon [flags]` runs the lease daemon, anything
//! else a runtime runs is the IPAM plugin ([`cni_metrics::daemon::dispatch`] chooses, as it
//! does for `etcd-ipam agent`). Here: the daemon's flags, and its start-up through
//! [`cni_metrics::daemon`] (the listening socket, its own or one systemd passes via
//! LISTEN_FDS, the pid file, the metrics endpoint).
//!
//! The flags are the reference daemon's, written as Go's flag package takes them
//! (`-socketpath P`, `-timeout=5s`, `--debug`): [`cni_cli::go_style_flags`] turns them into
//! clap's before parsing.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cni_cli::clap::{self, builder::BoolishValueParser, Parser, Subcommand};
use cni_cli::tracing;
use cni_cli::{LogArgs, LogLevel};
use cni_metrics::daemon as startup;

use super::client::Timing;
use super::daemon::{Daemon, Settings};
use super::protocol::DEFAULT_SOCKET_PATH;

pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/dhcp";

/// `dhcp` without a sub-command: what its `--help`, `--version` and `--completions` tell.
/// Run without arguments it is the plugin (the runtime's calls set CNI_COMMAND).
#[derive(Parser, Debug)]
#[command(
    name = "dhcp",
    version,
    about = "The dhcp IPAM plugin (CNI_COMMAND in the environment) and its lease daemon"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Sub>,
}

#[derive(Subcommand, Debug)]
pub enum Sub {
    /// Keep the DHCP leases of the `dhcp` IPAM plugin: acquire them in containers'
    /// namespaces, renew them, release them on DEL, and keep them on disk across restarts
    Daemon(DaemonArgs),
}

/// `dhcp daemon`'s flags; parsed on their own ([`parse_daemon`]) so that `dhcp daemon
/// --help` and `dhcp daemon --completions SHELL` answer as every program's flags do.
/// Flags may be written `-flag value`, `-flag=value` or `--flag`.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "dhcp", bin_name = "dhcp daemon", version, long_about = None)]
#[command(about = "Keeps the DHCP leases of the `dhcp` IPAM plugin: acquires them in containers' \
                   namespaces, renews them, releases them on DEL, and keeps them on disk across restarts")]
pub struct DaemonArgs {
    /// Unix socket to listen on [default: /run/cni/dhcp.sock, under -hostprefix], made
    /// 0600 in a directory made (or tightened to) 0700 whatever the umask; only root's
    /// connections are answered. With systemd socket activation (LISTEN_FDS) the passed
    /// socket is used instead
    #[arg(long = "socketpath", value_name = "PATH")]
    pub socket_path: Option<PathBuf>,
    /// Where leases are kept (0700, records 0600)
    #[arg(long = "statedir", value_name = "DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Write the daemon's pid there
    #[arg(long = "pidfile", value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// Prefix for namespace paths and the default socket (for a daemon in a container that
    /// sees the host's filesystem under DIR)
    #[arg(long = "hostprefix", value_name = "DIR", default_value = "")]
    pub host_prefix: String,
    /// Accepted for compatibility: requests in INIT always set the broadcast flag (the
    /// interface has no address to receive a unicast reply on)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub broadcast: Option<bool>,
    /// Upper bound for acquiring a lease, a Go duration (10s, 500ms, 1m30s)
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Longest wait between retransmissions, a Go duration
    #[arg(long = "resendmax", value_name = "DUR", default_value = "62s", value_parser = parse_duration)]
    pub resend_max: Duration,
    /// Log every failed attempt: the same as --log-level debug
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub debug: Option<bool>,
    /// Serve /healthz and /metrics (Prometheus) on this TCP address [default: off]
    #[arg(long = "metrics-address", value_name = "IP:PORT", value_parser = cni_metrics::parse_address)]
    pub metrics_address: Option<SocketAddr>,
    #[command(flatten)]
    pub log: LogArgs,
}

impl DaemonArgs {
    /// The socket to listen on: as the reference, the host prefix also moves the default.
    pub fn socket(&self) -> PathBuf {
        match &self.socket_path {
            Some(path) => path.clone(),
            None if self.host_prefix.is_empty() => DEFAULT_SOCKET_PATH.into(),
            None => format!("{}{DEFAULT_SOCKET_PATH}", self.host_prefix.trim_end_matches('/')).into(),
        }
    }

    /// The logging asked for: `-debug` raises the level to debug.
    fn logging(&self) -> LogArgs {
        let mut log = self.log.clone();
        if self.debug == Some(true)
            && matches!(log.log_level, LogLevel::Error | LogLevel::Warn | LogLevel::Info)
        {
            log.log_level = LogLevel::Debug;
        }
        log
    }
}

/// Go's duration syntax, the subset people write: `10s`, `1m30s`, `500ms`, `2h`, or plain
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration (e.g. 10s, 500ms, 1m30s)");
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if text.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| invalid())?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Parses the daemon's flags, `args` being the program name then what follows `daemon`,
/// Go-style flags included; exits as clap does on --help, --version, --completions and
/// errors (status 2).
pub fn parse_daemon(args: Vec<OsString>) -> DaemonArgs {
    cni_cli::parse_from(cni_cli::go_style_flags(args))
}

/// `dhcp daemon`: serves until killed.
pub fn run(args: &DaemonArgs) -> ExitCode {
    startup::main("dhcp", &args.logging(), || start(args))
}

fn start(args: &DaemonArgs) -> std::io::Result<()> {
    let socket_path = args.socket();
    let listener = startup::listener(&socket_path)?;
    startup::write_pid_file(args.pid_file.as_deref())?;
    let daemon = Daemon::new(Settings {
        state_dir: args.state_dir.clone(),
        host_prefix: args.host_prefix.clone(),
        timing: Timing { timeout: args.timeout, resend_max: args.resend_max },
    })
    .map_err(|e| {
        std::io::Error::new(e.kind(), format!("state directory {}: {e}", args.state_dir.display()))
    })?;
    daemon.resume()?;
    let me = daemon.clone();
    startup::serve_metrics(
        args.metrics_address,
        |registry| daemon.metrics().register(registry),
        move || me.health(),
    )?;
    tracing::info!(socket = %socket_path.display(), "listening");
    daemon.serve(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_cli::clap::CommandFactory;

    fn daemon(args: &[&str]) -> Result<DaemonArgs, clap::Error> {
        let argv = ["dhcp"].iter().chain(args).map(OsString::from);
        DaemonArgs::try_parse_from(cni_cli::go_style_flags(argv))
    }

    #[test]
    fn reference_flags() {
        let a = daemon(&[
            "-socketpath",
            "/tmp/x.sock",
            "-pidfile=/tmp/pid",
            "--hostprefix",
            "/host",
            "-broadcast",
            "-timeout",
            "1m30s",
            "-resendmax=500ms",
        ])
        .unwrap();
        assert_eq!(a.socket(), PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.pid_file, Some(PathBuf::from("/tmp/pid")));
        assert_eq!(a.host_prefix, "/host");
        assert_eq!(a.timeout, Duration::from_secs(90));
        assert_eq!(a.resend_max, Duration::from_millis(500));
        assert_eq!(a.broadcast, Some(true));
        let prefixed = daemon(&["-hostprefix", "/host/"]).unwrap();
        assert_eq!(prefixed.socket(), PathBuf::from("/host/run/cni/dhcp.sock"));
        let defaults = daemon(&[]).unwrap();
        assert_eq!(defaults.socket(), PathBuf::from(DEFAULT_SOCKET_PATH));
        assert_eq!(defaults.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(
            (defaults.timeout, defaults.resend_max),
            (Duration::from_secs(10), Duration::from_secs(62))
        );
        assert_eq!(defaults.metrics_address, None);
        let bad_timeout = daemon(&["-timeout", "soon"]).unwrap_err().to_string();
        assert!(bad_timeout.contains("--timeout") && bad_timeout.contains("soon"), "{bad_timeout}");
        assert!(daemon(&["-socketpath"]).is_err());
        assert!(daemon(&["-nope"]).unwrap_err().to_string().contains("--nope"));
        assert!(daemon(&["stray"]).is_err());
        let bad_metrics = daemon(&["-metrics-address", "localhost:1"]).unwrap_err().to_string();
        assert!(bad_metrics.contains("IP:PORT"), "{bad_metrics}");
        assert_eq!(
            daemon(&["-metrics-address=[::1]:9"]).unwrap().metrics_address,
            Some("[::1]:9".parse().unwrap())
        );
    }

    /// Go's boolean flags: `-debug`, `-debug=true|false`; `-debug` is `--log-level debug`
    /// unless a more verbose level was asked for.
    #[test]
    fn debug_is_a_go_boolean_and_raises_the_log_level() {
        assert_eq!(daemon(&[]).unwrap().logging().log_level, LogLevel::Info);
        assert_eq!(daemon(&["-debug"]).unwrap().logging().log_level, LogLevel::Debug);
        assert_eq!(daemon(&["-debug=true"]).unwrap().logging().log_level, LogLevel::Debug);
        assert_eq!(daemon(&["-debug=false"]).unwrap().logging().log_level, LogLevel::Info);
        assert_eq!(daemon(&["-debug", "--log-level", "trace"]).unwrap().logging().log_level, LogLevel::Trace);
        assert_eq!(daemon(&["-log-level=warn"]).unwrap().logging().log_level, LogLevel::Warn);
        assert!(daemon(&["-debug=maybe"]).is_err());
        // A bare `-debug` does not swallow the next flag as its value.
        assert_eq!(daemon(&["-debug", "-statedir", "/s"]).unwrap().state_dir, PathBuf::from("/s"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
    }

    /// docs/plugins/dhcp-daemon.md documents exactly the daemon's flags (Go-style
    /// spelling), and each one is accepted.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        cni_testkit::docs::assert_page_documents_exactly_the_flags(
            env!("CARGO_MANIFEST_DIR"),
            "dhcp-daemon.md",
            &DaemonArgs::command(),
            "-",
        );
    }
}
