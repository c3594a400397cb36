//! `cni-dnsd`: the resolver of the `dnsname` plugin. Started on demand by the plugin (or by
//! systemd through `cni-dnsd.socket`); see the crate documentation.

use cni_cli::clap::{self, Parser};
use cni_cli::tracing;
use cni_dns::StateDir;
use cni_dnsd::server::{Limits, Resolver, Settings};
use cni_metrics::daemon;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Every so often the records are read again even without a request, so a notification
/// lost to a crash between a plugin's write and its request is made up for.
const RESCAN: Duration = Duration::from_secs(30);

/// Answers container name lookups for the dnsname plugin's networks, on each network's
/// gateway address (at the port the network's record names: 1053 behind the plugin's
/// redirect of port 53, or 53 itself), and forwards other names upstream.
#[derive(Parser, Debug)]
// A flag given twice takes its last value, as before clap.
#[command(name = "cni-dnsd", version, args_override_self = true)]
struct Args {
    /// The records the plugin writes; the control socket is DIR/dnsd.sock (with systemd
    /// socket activation, the passed socket)
    #[arg(long, value_name = "DIR", default_value = cni_dns::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Upstream servers for networks without their own
    #[arg(long, value_name = "PATH", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Write the pid there
    #[arg(long = "pidfile", value_name = "PATH")]
    pid_file: Option<PathBuf>,
    /// Forwarded queries in flight at most
    #[arg(long, value_name = "N", default_value_t = Limits::default().forwards)]
    max_forwards: usize,
    /// TCP clients at most
    #[arg(long, value_name = "N", default_value_t = Limits::default().tcp_connections)]
    max_tcp: usize,
    /// Serve /healthz and /metrics there [default: off]
    #[arg(long = "metrics-address", value_name = "IP:PORT", value_parser = cni_metrics::parse_address)]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    log: cni_cli::LogArgs,
}

impl Args {
    fn settings(&self) -> Settings {
        Settings {
            state: StateDir::new(self.state_dir.clone()),
            resolv_conf: self.resolv_conf.clone(),
            limits: Limits { forwards: self.max_forwards, tcp_connections: self.max_tcp },
        }
    }
}

fn run(args: Args) -> std::io::Result<()> {
    let settings = args.settings();
    let state = &settings.state;
    cni_dns::store::private_dir(state.root()).map_err(std::io::Error::other)?;
    // Whoever can talk to the resolver can make it reload.
    let listener = daemon::listener(&state.socket_path())?;
    daemon::write_pid_file(args.pid_file.as_deref())?;
    // Before any thread exists (capset is per thread).
    if let Err(e) = cni_dnsd::caps::keep_only(&[cni_dnsd::caps::CAP_NET_BIND_SERVICE]) {
        tracing::warn!(error = %e, "could not drop capabilities");
    }
    let resolver = Resolver::new(settings.clone());
    let loaded = resolver.reload();
    tracing::info!(state = %state.root().display(), "started: {loaded}");
    let me = resolver.clone();
    daemon::serve_metrics(args.metrics, |registry| resolver.metrics.register(registry), move || me.health())?;
    let rescanner = resolver.clone();
    std::thread::Builder::new().name("rescan".into()).spawn(move || loop {
        std::thread::sleep(RESCAN);
        rescanner.reload();
    })?;
    resolver.serve_control(listener)
}

fn main() -> ExitCode {
    let args: Args = cni_cli::parse();
    let log = args.log.clone();
    daemon::main("cni-dnsd", &log, || run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(["cni-dnsd"].iter().chain(args))
    }

    /// docs/plugins/cni-dnsd.md documents exactly the daemon's flags.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        cni_testkit::docs::assert_page_documents_exactly_the_flags(
            env!("CARGO_MANIFEST_DIR"),
            "cni-dnsd.md",
            &Args::command(),
            "--",
        );
    }

    #[test]
    fn flags_keep_their_meaning_and_defaults() {
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.state_dir, PathBuf::from(cni_dns::DEFAULT_STATE_DIR));
        assert_eq!(defaults.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        assert_eq!((defaults.max_forwards, defaults.max_tcp, defaults.metrics), (256, 64, None));
        let set = parse(&[
            "--state-dir",
            "/run/x",
            "--resolv-conf=/etc/r",
            "--pidfile",
            "/run/p",
            "--max-forwards",
            "3",
            "--max-tcp=4",
            "--metrics-address",
            "[::1]:9471",
        ])
        .unwrap();
        let settings = set.settings();
        assert_eq!(settings.state.root(), std::path::Path::new("/run/x"));
        assert_eq!(settings.resolv_conf, PathBuf::from("/etc/r"));
        assert_eq!(set.pid_file, Some(PathBuf::from("/run/p")));
        assert_eq!((settings.limits.forwards, settings.limits.tcp_connections), (3, 4));
        assert_eq!(set.metrics, Some("[::1]:9471".parse().unwrap()));
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        for args in [&["--max-tcp", "many"][..], &["--metrics-address", "localhost:1"], &["--state-dir"]] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(args[0]), "{args:?}: {e}");
        }
    }
}
