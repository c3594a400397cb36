//! etcd-ipam-agent: serves etcd-ipam's ADD and DEL for the plugins of one node on a unix
//! socket (`agentSocket` in the plugin's configuration), with one kept-alive etcd
//! connection and the node's current block cached per network. See
//! `cni_plugins::ipam::etcd::agent` for the protocol and docs/multi-host.md for why.
//!
//! ```text
//! etcd-ipam-agent --socket /run/cni-rs/etcd-ipam.sock
//! ```

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    if let Some(dir) = socket.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // A socket file left by an agent that was killed: nobody listens on it any more.
    if std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let _ = std::fs::remove_file(&socket);
    }
    let listener = match UnixListener::bind(&socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("etcd-ipam-agent: binding {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    eprintln!("etcd-ipam-agent: serving on {}", socket.display());
    Arc::new(Agent::default()).serve(listener);
    ExitCode::SUCCESS
}
