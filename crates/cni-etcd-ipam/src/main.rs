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

use cni_etcd_ipam::agent::Agent;
use cni_etcd_ipam::plugin::EtcdIpam;
use cni_metrics::prometheus_client::registry::Registry;
use cni_os::socket;

const USAGE: &str = "usage: etcd-ipam agent --socket PATH [OPTIONS]
  --metrics-address IP:PORT  serve /healthz and /metrics there (off by default)";

/// What the agent's arguments (those after `agent`) ask for.
#[derive(Debug, PartialEq)]
struct Args {
    socket: PathBuf,
    metrics: Option<SocketAddr>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let (mut socket, mut metrics) = (None, None);
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--socket" => socket = Some(PathBuf::from(value)),
            "--metrics-address" => metrics = Some(cni_metrics::parse_address(value)?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args { socket: socket.ok_or("--socket is required")?, metrics })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((sub_command, rest)) if sub_command == "agent" => agent(rest),
        // Whatever else: the plugin, which answers a call without CNI_COMMAND with its
        // name and versions, as every plugin does.
        _ => cni_sdk::run(&EtcdIpam),
    }
}

/// `etcd-ipam agent`: serves until killed.
fn agent(args: &[String]) -> ExitCode {
    let Args { socket, metrics } = match parse_args(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("etcd-ipam agent: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // The socket file is 0600 in a 0700 directory whatever the umask (whoever can talk
    // to the agent can release any container's address), or the one systemd passes.
    let listener = match socket::activated_listener().and_then(|passed| match passed {
        Some(listener) => Ok(listener),
        None => socket::bind_private(&socket),
    }) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("etcd-ipam agent: listening on {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    let agent = Arc::new(Agent::default());
    if let Some(address) = metrics {
        let mut registry = Registry::default();
        agent.metrics().register(&mut registry);
        let etcd = agent.metrics().etcd.clone();
        // Healthy unless the latest etcd round trip (of any network) went unanswered.
        let health = Box::new(move || etcd.reachability.check("etcd", None));
        match cni_metrics::serve(address, registry, health) {
            Ok(bound) => eprintln!("etcd-ipam agent: metrics on http://{bound}/metrics"),
            Err(e) => {
                eprintln!("etcd-ipam agent: metrics address {address}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("etcd-ipam agent: serving on {}", socket.display());
    agent.serve(listener);
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_testkit::docs;

    /// docs/plugins/etcd-ipam-agent.md documents exactly the flags the usage names, and
    /// each one is accepted.
    #[test]
    fn the_page_documents_exactly_the_flags() {
        let page = docs::read_page(env!("CARGO_MANIFEST_DIR"), "etcd-ipam-agent.md").unwrap();
        let documented = docs::table_keys(&page, "Flags");
        let problems = docs::compare("etcd-ipam-agent.md", "flag", &docs::usage_flags(USAGE), &documented);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        let values = [("--socket", "/run/x.sock"), ("--metrics-address", "127.0.0.1:9471")];
        for flag in documented {
            let value = values.iter().find(|(f, _)| *f == flag).map(|(_, v)| *v).expect("a value to try");
            let mut args = vec!["--socket".to_string(), "/run/x.sock".into()];
            args.extend([flag.clone(), value.to_string()]);
            assert!(parse_args(&args).is_ok(), "{flag} is not accepted");
        }
    }

    #[test]
    fn metrics_are_off_unless_asked_for_and_the_address_is_checked() {
        let args = |a: &[&str]| parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(args(&["--socket", "/s"]).unwrap().metrics, None);
        let on = args(&["--socket", "/s", "--metrics-address", "[::1]:9471"]).unwrap();
        assert_eq!(on.metrics, Some("[::1]:9471".parse().unwrap()));
        assert!(args(&["--socket", "/s", "--metrics-address", "localhost:1"])
            .unwrap_err()
            .contains("IP:PORT"));
        assert!(args(&["--metrics-address", "127.0.0.1:1"]).unwrap_err().contains("--socket"));
        assert!(args(&["--socket"]).is_err());
    }
}
