//! The dhcp daemon's socket and state attacked as issue #23 found them open: a socket
//! directory of 0755 (and a socket whose mode came from the umask), a request timeout per
//! read that let clients trickling a byte every 8 s hold a thread each, no bound on
//! threads. The daemon runs as its binary under umask 000, in the test's own namespace;
//! none of these requests reaches a DHCP server.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use cni_plugins::ipam::dhcp::protocol::{self, Op};
use cni_testkit::socket_attack::{self, command_under_umask_000};

struct Daemon {
    child: Child,
    socket: PathBuf,
    state: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// The daemon with a socket and a state directory that do not exist yet.
    fn start() -> Daemon {
        let dir = tempfile::Builder::new().prefix("ds-dhcp").tempdir().unwrap();
        let socket = dir.path().join("run/cni/dhcp.sock");
        let state = dir.path().join("state");
        let child = command_under_umask_000(Path::new(env!("CARGO_BIN_EXE_cni-plugins")))
            .args(["dhcp", "daemon", "-socketpath"])
            .arg(&socket)
            .arg("-statedir")
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        socket_attack::wait_for_socket(&socket);
        Daemon { child, socket, state, _dir: dir }
    }

    fn answers_status(&self) -> bool {
        protocol::call(&self.socket, Op::Status, None, Duration::from_secs(5)).is_ok_and(|r| r.ok)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn under_umask_000_the_socket_and_state_are_root_only_and_nobody_is_refused() {
    let daemon = Daemon::start();
    // What an attacker wants: another container's lease released.
    let del = r#"{"version":1,"op":"del","network":"dsnet","containerID":"victim","ifname":"eth0"}"#;
    let refusal = socket_attack::assert_root_only(&daemon.socket, del);
    let refusal: protocol::Response = serde_json::from_str(&refusal).unwrap();
    assert_eq!((refusal.ok, refusal.code), (false, 4), "{refusal:?}");
    assert_eq!(std::fs::metadata(&daemon.state).unwrap().mode() & 0o7777, 0o700, "state directory");
    assert!(daemon.answers_status(), "root is still served");
}

#[test]
fn a_512_mib_request_is_refused_and_the_daemon_lives_on() {
    let daemon = Daemon::start();
    let refusal = socket_attack::assert_oversized_refused(daemon.child.id(), &daemon.socket, 64 << 10);
    let refusal: protocol::Response = serde_json::from_str(&refusal).unwrap();
    assert_eq!((refusal.ok, refusal.code), (false, 6), "{refusal:?}");
    assert!(daemon.answers_status());
}

#[test]
fn clients_trickling_a_byte_every_8_s_are_cut_and_threads_stay_capped() {
    let daemon = Daemon::start();
    let cap = cni_os::socket::DEFAULT_MAX_CONNECTIONS;
    socket_attack::assert_slow_loris_bounded(daemon.child.id(), &daemon.socket, Duration::from_secs(8), cap);
    assert!(daemon.answers_status(), "served again once they are gone");
}

/// systemd socket activation taken at its word only for a listening unix socket: with
/// `LISTEN_FDS` set and fd 3 something else (here /dev/null), the daemon says so and
/// exits instead of serving on it or binding a socket of its own.
#[test]
fn a_passed_fd_3_that_is_not_a_listening_socket_is_refused() {
    let dir = tempfile::Builder::new().prefix("ds-dhcp").tempdir().unwrap();
    let socket = dir.path().join("run/dhcp.sock");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", "exec 3</dev/null; LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" dhcp daemon -socketpath \"$1\" -statedir \"$2\""])
        .arg(env!("CARGO_BIN_EXE_cni-plugins"))
        .arg(&socket)
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fd 3 from systemd is not a listening unix stream socket"), "{stderr}");
    assert!(!socket.exists());
}
