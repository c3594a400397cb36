//! The agent's socket attacked as issue #23 found it open: a local user releasing another
//! container's address through a socket whose mode came from the umask, a 512 MiB request
//! line, and idle connections each holding a thread. The agent runs as its binary, started
//! under umask 000; no etcd is needed, as none of these requests get that far.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use cni_testkit::socket_attack::{self, command_under_umask_000};

/// A DEL as a plugin would send it: what an attacker would use to free someone's address.
fn del_request() -> String {
    let config = serde_json::json!({
        "cniVersion": "1.0.0", "name": "dsnet", "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": ["http://127.0.0.1:9"], "node": "ds-node",
                 "pools": ["10.99.0.0/16"]}});
    format!("{}\n", serde_json::json!({"op": "del", "config": config, "handle": "victim/eth0"}))
}

struct Agent {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// The agent on a socket in a directory that does not exist yet.
    fn start() -> Agent {
        let dir = tempfile::Builder::new().prefix("ds-agent").tempdir().unwrap();
        let socket = dir.path().join("run/cni-rs/agent.sock");
        let child = command_under_umask_000(Path::new(env!("CARGO_BIN_EXE_etcd-ipam")))
            .args(["agent", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        socket_attack::wait_for_socket(&socket);
        Agent { child, socket, _dir: dir }
    }

    /// A request from root, answered: the agent is alive and serving.
    fn answers(&self, line: &str) -> String {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        stream.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).unwrap();
        answer
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn under_umask_000_the_socket_is_root_only_and_nobody_is_refused() {
    let agent = Agent::start();
    let refusal = socket_attack::assert_root_only(&agent.socket, &del_request());
    assert!(refusal.contains("\"code\":4"), "{refusal}");
    assert!(agent.answers("not json\n").contains("not JSON"), "root is still served");
}

#[test]
fn a_512_mib_request_line_is_refused_and_the_agent_lives_on() {
    let agent = Agent::start();
    let refusal = socket_attack::assert_oversized_refused(agent.child.id(), &agent.socket, 64 << 10);
    assert!(refusal.contains("\"code\":6"), "{refusal}");
    assert!(agent.answers("not json\n").contains("not JSON"));
}

#[test]
fn slow_loris_clients_are_cut_at_the_deadline_and_threads_stay_capped() {
    let agent = Agent::start();
    let cap = cni_os::socket::DEFAULT_MAX_CONNECTIONS;
    socket_attack::assert_slow_loris_bounded(agent.child.id(), &agent.socket, Duration::from_secs(8), cap);
    assert!(agent.answers("not json\n").contains("not JSON"), "served again once they are gone");
}
