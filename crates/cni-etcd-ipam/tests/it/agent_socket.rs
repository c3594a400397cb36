//! The agent's socket attacked the ways a local user would: a local user releasing another
//! container's address through a socket whose mode came from the umask, a 512 MiB request
//! line, and idle connections each holding a thread. The agent runs as its binary, started
//! under umask 000; no etcd is needed, as none of these requests get that far.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use cni_testkit::socket_attack::{self, UmaskDaemon};

/// A DEL as a plugin would send it: what an attacker would use to free someone's address.
fn del_request() -> String {
    let config = serde_json::json!({
        "cniVersion": "1.0.0", "name": "dsnet", "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": ["http://127.0.0.1:9"], "node": "ds-node",
                 "pools": ["10.99.0.0/16"]}});
    format!("{}\n", serde_json::json!({"op": "del", "config": config, "handle": "victim/eth0"}))
}

/// The agent on a socket in a directory that does not exist yet.
fn start_agent() -> UmaskDaemon {
    UmaskDaemon::start(
        Path::new(env!("CARGO_BIN_EXE_etcd-ipam")),
        "ds-agent",
        "run/cni-rs/agent.sock",
        |dir| vec!["agent".into(), "--socket".into(), dir.join("run/cni-rs/agent.sock").into()],
    )
}

/// A request from root, answered: the agent is alive and serving.
fn answer(agent: &UmaskDaemon, line: &str) -> String {
    let mut stream = UnixStream::connect(&agent.socket).unwrap();
    stream.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn under_umask_000_the_socket_is_root_only_and_nobody_is_refused() {
    let agent = start_agent();
    let refusal = socket_attack::assert_root_only(&agent.socket, &del_request());
    assert!(refusal.contains("\"code\":4"), "{refusal}");
    assert!(answer(&agent, "not json\n").contains("not JSON"), "root is still served");
}

#[test]
fn a_512_mib_request_line_is_refused_and_the_agent_lives_on() {
    let agent = start_agent();
    let refusal = socket_attack::assert_oversized_refused(agent.pid(), &agent.socket, 64 << 10);
    assert!(refusal.contains("\"code\":6"), "{refusal}");
    assert!(answer(&agent, "not json\n").contains("not JSON"));
}

#[test]
fn slow_loris_clients_are_cut_at_the_deadline_and_threads_stay_capped() {
    let agent = start_agent();
    let cap = cni_os::socket::DEFAULT_MAX_CONNECTIONS;
    let served = || answer(&agent, "not json\n").contains("not JSON");
    socket_attack::assert_slow_loris_bounded(agent.pid(), &agent.socket, Duration::from_secs(8), cap, served);
}
