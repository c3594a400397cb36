//! etcd-ipam: the plugin a runtime runs (CNI_COMMAND in the environment), and, as
//! `etcd-ipam agent --socket PATH`, the node agent that serves the plugins of one node on
//! a unix socket (`agentSocket` in the plugin's configuration) with one kept-alive etcd
//! connection and the node's current block cached per network. See
//! `cni_etcd_ipam::agent` for the protocol and docs/multi-host.md for why.
//!
//! ```text
//! etcd-ipam agent --socket /run/cni-rs/etcd-ipam.sock
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cni_etcd_ipam::agent::Agent;
use cni_etcd_ipam::plugin::EtcdIpam;
use cni_os::socket;

const USAGE: &str = "usage: etcd-ipam agent --socket PATH";

/// The socket path from the agent's arguments (those after `agent`).
fn socket_arg(args: &[String]) -> Option<PathBuf> {
    match args {
        [flag, path] if flag == "--socket" => Some(PathBuf::from(path)),
        _ => None,
    }
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
    let Some(socket) = socket_arg(args) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
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
    eprintln!("etcd-ipam agent: serving on {}", socket.display());
    Arc::new(Agent::default()).serve(listener);
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
        for flag in documented {
            assert!(socket_arg(&[flag.clone(), "/run/x.sock".into()]).is_some(), "{flag} is not accepted");
        }
    }
}
