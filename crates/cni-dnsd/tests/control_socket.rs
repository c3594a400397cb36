//! The resolver's control socket attacked as a local user, an oversized request and
//! slow clients would: the same root-only request server as the other daemons
//! (`cni_os::socket`), here with the control socket's own deadline (2 s) and cap (8).
//! The resolver runs as its binary under umask 000 with an empty state directory, so it
//! answers on no address and changes nothing on the machine.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use cni_dns::control;
use cni_testkit::socket_attack::{self, command_under_umask_000};

struct Resolver {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Resolver {
    fn start() -> Resolver {
        let dir = tempfile::Builder::new().prefix("ds-dnsd").tempdir().unwrap();
        let state = dir.path().join("run/dnsname");
        let child = command_under_umask_000(Path::new(env!("CARGO_BIN_EXE_cni-dnsd")))
            .arg("--state-dir")
            .arg(&state)
            .arg("--resolv-conf")
            .arg("/dev/null")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let socket = state.join("dnsd.sock");
        socket_attack::wait_for_socket(&socket);
        Resolver { child, socket, _dir: dir }
    }

    fn answers_status(&self) -> bool {
        control::request(&self.socket, "status", Duration::from_secs(5)).is_ok()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn under_umask_000_the_control_socket_is_root_only_and_nobody_is_refused() {
    let resolver = Resolver::start();
    let refusal = socket_attack::assert_root_only(&resolver.socket, "reload\n");
    assert!(refusal.starts_with("error "), "{refusal:?}");
    assert!(resolver.answers_status(), "root is still served");
}

#[test]
fn a_512_mib_control_line_is_refused_and_the_resolver_lives_on() {
    let resolver = Resolver::start();
    let refusal = socket_attack::assert_oversized_refused(resolver.child.id(), &resolver.socket, 64 << 10);
    assert!(refusal.starts_with("error "), "{refusal:?}");
    assert!(resolver.answers_status());
}

#[test]
fn slow_control_clients_are_cut_at_the_deadline_and_threads_stay_capped() {
    let resolver = Resolver::start();
    socket_attack::assert_slow_loris_bounded(
        resolver.child.id(),
        &resolver.socket,
        Duration::from_secs(1),
        8,
    );
    assert!(resolver.answers_status(), "served again once they are gone");
}
