//! etcd-ipam-agent: serves etcd-ipam's ADD and DEL for the plugins of one node on a unix
//! socket (`agentSocket` in the plugin's configuration), with one kept-alive etcd
//! connection and the node's current block cached per network. See
//! `cni_plugins::ipam::etcd::agent` for the protocol and docs/multi-host.md for why.
//!
//! ```text
//! etcd-ipam-agent --socket /run/cni-rs/etcd-ipam.sock
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cni_os::socket;
use cni_plugins::ipam::etcd::agent::Agent;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let socket = match args.as_slice() {
        [_, flag, path] if flag == "--socket" => PathBuf::from(path),
        _ => {
            eprintln!("usage: etcd-ipam-agent --socket PATH");
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
            eprintln!("etcd-ipam-agent: listening on {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    eprintln!("etcd-ipam-agent: serving on {}", socket.display());
    Arc::new(Agent::default()).serve(listener);
    ExitCode::FAILURE
}
