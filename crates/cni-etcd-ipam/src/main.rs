//! etcd-ipam: the plugin a runtime runs (CNI_COMMAND in the environment), and, as
//! `etcd-ipam agent --socket PATH`, the node agent that serves the plugins of one node on
//! a unix socket (`agentSocket` in the plugin's configuration) with one kept-alive etcd
//! connection and the node's current block cached per network. See
//! `cni_etcd_ipam::agent` for the protocol and docs/multi-host.md for why.
//!
//! ```text
//! etcd-ipam agent --socket /run/cni-rs/etcd-ipam.sock [--metrics-address 127.0.0.1:9471]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cni_cli::clap::{self, Parser, Subcommand};
use cni_cli::tracing;
use cni_etcd_ipam::agent::Agent;
use cni_etcd_ipam::plugin::EtcdIpam;
use cni_metrics::daemon;

/// `etcd-ipam` with arguments other than `agent`: what its `--help`, `--version` and
/// `--completions` tell. Run without arguments it is the plugin.
#[derive(Parser, Debug)]
#[command(
    name = "etcd-ipam",
    version,
    about = "The etcd-ipam IPAM plugin (CNI_COMMAND in the environment) and its node agent"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Serve the etcd-ipam plugins of this node on a unix socket, with one kept-alive etcd
    /// connection and the node's current block cached per network
    Agent(AgentArgs),
}

/// `etcd-ipam agent`'s flags; parsed on their own so that `etcd-ipam agent --help` and
/// `etcd-ipam agent --completions SHELL` answer as every program's flags do.
#[derive(Parser, Debug, PartialEq)]
// A flag given twice takes its last value, as before clap.
#[command(name = "etcd-ipam", bin_name = "etcd-ipam agent", version, args_override_self = true)]
struct AgentArgs {
    /// The unix socket to serve on (`agentSocket` in the plugin's configuration): 0600 in a
    /// directory made (or tightened to) 0700; a stale socket nobody answers on is replaced.
    /// With systemd socket activation (LISTEN_FDS) the passed socket is used instead
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Serve /healthz and /metrics (Prometheus) on this TCP address [default: off]
    #[arg(long = "metrics-address", value_name = "IP:PORT", value_parser = cni_metrics::parse_address)]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    log: cni_cli::LogArgs,
}

fn main() -> ExitCode {
    daemon::dispatch::<Cli>("agent", || cni_sdk::run(&EtcdIpam), |args| agent(cni_cli::parse_from(args)))
}

/// `etcd-ipam agent`: serves until killed.
fn agent(args: AgentArgs) -> ExitCode {
    daemon::main("etcd-ipam", &args.log, || -> std::io::Result<()> {
        // Whoever can talk to the agent can release any container's address.
        let listener = daemon::listener(&args.socket)?;
        let agent = Arc::new(Agent::default());
        let etcd = agent.metrics().etcd.clone();
        // Healthy unless the latest etcd round trip (of any network) went unanswered.
        let health = move || etcd.reachability.check("etcd", None);
        daemon::serve_metrics(args.metrics, |registry| agent.metrics().register(registry), health)?;
        tracing::info!(socket = %args.socket.display(), "serving");
        agent.serve(listener)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::CommandFactory;

    fn parse_args(args: &[&str]) -> Result<AgentArgs, clap::Error> {
        AgentArgs::try_parse_from(["etcd-ipam"].iter().chain(args))
    }

    /// docs/plugins/etcd-ipam-agent.md documents exactly the agent's flags.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        cni_testkit::docs::assert_page_documents_exactly_the_flags(
            env!("CARGO_MANIFEST_DIR"),
            "etcd-ipam-agent.md",
            &AgentArgs::command(),
            "--",
        );
    }

    #[test]
    fn metrics_are_off_unless_asked_for_and_the_address_is_checked() {
        let off = parse_args(&["--socket", "/s"]).unwrap();
        assert_eq!((off.socket, off.metrics), (PathBuf::from("/s"), None));
        let on = parse_args(&["--socket", "/s", "--metrics-address", "[::1]:9471"]).unwrap();
        assert_eq!(on.metrics, Some("[::1]:9471".parse().unwrap()));
        let bad = parse_args(&["--socket", "/s", "--metrics-address", "localhost:1"]).unwrap_err();
        assert!(bad.to_string().contains("IP:PORT"), "{bad}");
        let missing = parse_args(&["--metrics-address", "127.0.0.1:1"]).unwrap_err();
        assert!(missing.to_string().contains("--socket"), "{missing}");
        assert!(parse_args(&["--socket"]).is_err());
    }

    #[test]
    fn the_agent_is_a_sub_command_of_the_programs_own_help() {
        let cli = Cli::try_parse_from(["etcd-ipam", "agent", "--socket", "/s"]).unwrap();
        assert!(
            matches!(cli.command, Some(Sub::Agent(AgentArgs { ref socket, .. })) if socket == &PathBuf::from("/s"))
        );
    }
}
