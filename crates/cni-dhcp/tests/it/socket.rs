//! The dhcp daemon's socket and state attacked where an audit found them open: a socket
//! directory of 0755 (and a socket whose mode came from the umask), a request timeout per
//! read that let clients trickling a byte every 8 s hold a thread each, no bound on
//! threads. The daemon runs as its binary under umask 000, in the test's own namespace;
//! none of these requests reaches a DHCP server.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use cni_dhcp::protocol::{self, Op};
use cni_testkit::socket_attack::{self, UmaskDaemon};

/// The daemon with a socket and a state directory (`state` in the temp dir) that do not
/// exist yet.
fn start_daemon() -> UmaskDaemon {
    UmaskDaemon::start(Path::new(env!("CARGO_BIN_EXE_dhcp")), "db-dhcp", "run/cni/dhcp.sock", |dir| {
        let mut args: Vec<OsString> = ["daemon", "-socketpath"].map(OsString::from).into();
        args.extend([dir.join("run/cni/dhcp.sock").into(), "-statedir".into(), dir.join("state").into()]);
        args
    })
}

fn answers_status(daemon: &UmaskDaemon) -> bool {
    protocol::call(&daemon.socket, Op::Status, None, Duration::from_secs(5)).is_ok_and(|r| r.ok)
}

#[test]
fn under_umask_000_the_socket_and_state_are_root_only_and_nobody_is_refused() {
    let daemon = start_daemon();
    // What an attacker wants: another container's lease released.
    let del = r#"{"version":1,"op":"del","network":"dsnet","containerID":"victim","ifname":"eth0"}"#;
    let refusal = socket_attack::assert_root_only(&daemon.socket, del);
    let refusal: protocol::Response = serde_json::from_str(&refusal).unwrap();
    assert_eq!((refusal.ok, refusal.code), (false, 4), "{refusal:?}");
    assert_eq!(
        std::fs::metadata(daemon.dir.path().join("state")).unwrap().mode() & 0o7777,
        0o700,
        "state directory"
    );
    assert!(answers_status(&daemon), "root is still served");
}

#[test]
fn a_512_mib_request_is_refused_and_the_daemon_lives_on() {
    let daemon = start_daemon();
    let refusal = socket_attack::assert_oversized_refused(daemon.pid(), &daemon.socket, 64 << 10);
    let refusal: protocol::Response = serde_json::from_str(&refusal).unwrap();
    assert_eq!((refusal.ok, refusal.code), (false, 6), "{refusal:?}");
    assert!(answers_status(&daemon));
}

#[test]
fn clients_trickling_a_byte_every_8_s_are_cut_and_threads_stay_capped() {
    let daemon = start_daemon();
    let cap = cni_os::socket::DEFAULT_MAX_CONNECTIONS;
    let served = || answers_status(&daemon);
    socket_attack::assert_slow_loris_bounded(
        daemon.pid(),
        &daemon.socket,
        Duration::from_secs(8),
        cap,
        served,
    );
}

/// systemd socket activation taken at its word only for a listening unix socket: with
/// `LISTEN_FDS` set and fd 3 something else (here /dev/null), the daemon says so and
/// exits instead of serving on it or binding a socket of its own.
#[test]
fn a_passed_fd_3_that_is_not_a_listening_socket_is_refused() {
    let dir = tempfile::Builder::new().prefix("db-dhcp").tempdir().unwrap();
    let socket = dir.path().join("run/dhcp.sock");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", "exec 3</dev/null; LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" daemon -socketpath \"$1\" -statedir \"$2\""])
        .arg(env!("CARGO_BIN_EXE_dhcp"))
        .arg(&socket)
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fd 3 from systemd is not a listening unix stream socket"), "{stderr}");
    assert!(!socket.exists());
}
