//! `cni-plugins dhcp daemon` (or `dhcp daemon` through the plugin link): flags, the
//! listening socket (its own, or one systemd passes via LISTEN_FDS), the pid file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cni_os::fs::Durability;
use cni_os::socket;

use super::client::{log, Timing};
use super::daemon::{Daemon, Settings};
use super::protocol::DEFAULT_SOCKET_PATH;

pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/dhcp";

pub const USAGE: &str = "usage: cni-plugins dhcp daemon [flags]   (also: dhcp daemon [flags])
Keeps the DHCP leases of the `dhcp` IPAM plugin: acquires them in containers' namespaces,
renews them, releases them on DEL, and keeps them on disk across restarts.

  -socketpath PATH  unix socket to listen on [/run/cni/dhcp.sock], made 0600 in its
                    directory made (or tightened to) 0700, whatever the umask; only root's
                    connections are answered. With systemd socket activation (LISTEN_FDS)
                    the passed socket is used instead
  -statedir DIR     where leases are kept [/var/lib/cni/dhcp] (0700, records 0600)
  -pidfile PATH     write the daemon's pid there
  -hostprefix DIR   prefix for namespace paths and the default socket (when running in a
                    container that sees the host's filesystem under DIR)
  -broadcast        accepted for compatibility: requests in INIT always set the broadcast
                    flag (the interface has no address to receive a unicast reply on)
  -timeout DUR      upper bound for acquiring a lease, e.g. 10s, 500ms [10s]
  -resendmax DUR    longest wait between retransmissions [62s]
  -debug            log every failed attempt
  -metrics-address IP:PORT
                    serve /healthz and /metrics (Prometheus) there [off]
  -h, --help        this text
Flags may also be written --flag or -flag=value.";

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonArgs {
    pub socket_path: PathBuf,
    pub state_dir: PathBuf,
    pub pid_file: Option<PathBuf>,
    pub host_prefix: String,
    pub timeout: Duration,
    pub resend_max: Duration,
    pub debug: bool,
    pub metrics_address: Option<std::net::SocketAddr>,
}

/// Go's duration syntax, the subset people write: `10s`, `1m30s`, `500ms`, `2h`, or plain
/// seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(value * scale).ok()?;
        rest = &rest[unit_len..];
    }
    (!text.is_empty()).then_some(total)
}

/// Parses the flags after `daemon`; `Ok(None)` means help was asked for.
pub fn parse_args(args: &[String]) -> Result<Option<DaemonArgs>, String> {
    let mut parsed = DaemonArgs {
        socket_path: DEFAULT_SOCKET_PATH.into(),
        state_dir: DEFAULT_STATE_DIR.into(),
        pid_file: None,
        host_prefix: String::new(),
        timeout: Duration::from_secs(10),
        resend_max: Duration::from_secs(62),
        debug: false,
        metrics_address: None,
    };
    let mut socket_given = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let flag = arg.trim_start_matches('-');
        if flag.len() == arg.len() {
            return Err(format!("unexpected argument {arg:?}"));
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        let mut value = |name: &str| {
            inline.clone().or_else(|| iter.next().cloned()).ok_or_else(|| format!("-{name} needs a value"))
        };
        let duration = |name: &str, v: String| {
            parse_duration(&v).ok_or_else(|| format!("-{name}: {v:?} is not a duration (e.g. 10s)"))
        };
        match name {
            "h" | "help" => return Ok(None),
            "socketpath" => {
                parsed.socket_path = value(name)?.into();
                socket_given = true;
            }
            "statedir" => parsed.state_dir = value(name)?.into(),
            "pidfile" => parsed.pid_file = Some(value(name)?.into()),
            "hostprefix" => parsed.host_prefix = value(name)?,
            "timeout" => parsed.timeout = duration(name, value(name)?)?,
            "resendmax" => parsed.resend_max = duration(name, value(name)?)?,
            // Go's boolean flags take `-flag` or `-flag=true|false`.
            "broadcast" => {}
            "debug" => parsed.debug = matches!(inline.as_deref(), None | Some("true" | "1")),
            "metrics-address" => parsed.metrics_address = Some(cni_metrics::parse_address(&value(name)?)?),
            _ => return Err(format!("unknown flag {arg:?}")),
        }
    }
    // As the reference: the host prefix also moves the default socket.
    if !socket_given && !parsed.host_prefix.is_empty() {
        parsed.socket_path =
            format!("{}{DEFAULT_SOCKET_PATH}", parsed.host_prefix.trim_end_matches('/')).into();
    }
    Ok(Some(parsed))
}

pub fn run(args: &[String]) -> ExitCode {
    let parsed = match parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("dhcp daemon: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if parsed.debug {
        log::enable_debug();
    }
    match start(&parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dhcp daemon: {e}");
            ExitCode::FAILURE
        }
    }
}

fn start(args: &DaemonArgs) -> std::io::Result<()> {
    let listen_error = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("listen on {}: {e}", args.socket_path.display()))
    };
    let listener = match socket::activated_listener().map_err(listen_error)? {
        Some(l) => l,
        None => socket::bind_private(&args.socket_path).map_err(listen_error)?,
    };
    if let Some(pid_file) = &args.pid_file {
        let pid = format!("{}\n", std::process::id());
        cni_os::fs::write_atomic(pid_file, pid.as_bytes(), 0o644, Durability::Unsynced)?;
    }
    let daemon = Daemon::new(Settings {
        state_dir: args.state_dir.clone(),
        host_prefix: args.host_prefix.clone(),
        timing: Timing { timeout: args.timeout, resend_max: args.resend_max },
    })
    .map_err(|e| {
        std::io::Error::new(e.kind(), format!("state directory {}: {e}", args.state_dir.display()))
    })?;
    daemon.resume()?;
    if let Some(address) = args.metrics_address {
        let mut registry = cni_metrics::prometheus_client::registry::Registry::default();
        daemon.metrics().register(&mut registry);
        let me = daemon.clone();
        let bound = cni_metrics::serve(address, registry, Box::new(move || me.health()))?;
        log::info(format_args!("metrics on http://{bound}/metrics"));
    }
    log::info(format_args!("listening on {}", args.socket_path.display()));
    daemon.serve(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reference_flags() {
        let a = parse_args(&strings(&[
            "-socketpath",
            "/tmp/x.sock",
            "-pidfile=/tmp/pid",
            "--hostprefix",
            "/host",
            "-broadcast",
            "-timeout",
            "1m30s",
            "-resendmax=500ms",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.socket_path, PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.pid_file, Some(PathBuf::from("/tmp/pid")));
        assert_eq!(a.host_prefix, "/host");
        assert_eq!(a.timeout, Duration::from_secs(90));
        assert_eq!(a.resend_max, Duration::from_millis(500));
        assert_eq!(parse_args(&strings(&["--help"])).unwrap(), None);
        let prefixed = parse_args(&strings(&["-hostprefix", "/host/"])).unwrap().unwrap();
        assert_eq!(prefixed.socket_path, PathBuf::from("/host/run/cni/dhcp.sock"));
        assert_eq!(parse_args(&[]).unwrap().unwrap().socket_path, PathBuf::from(DEFAULT_SOCKET_PATH));
        assert!(parse_args(&strings(&["-timeout", "soon"])).unwrap_err().contains("-timeout"));
        assert!(parse_args(&strings(&["-socketpath"])).unwrap_err().contains("needs a value"));
        assert!(parse_args(&strings(&["-nope"])).is_err());
        assert!(parse_args(&strings(&["stray"])).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("s"), None);
    }
}
