//! systemd socket activation: a control socket handed over as fd 3 (LISTEN_PID/LISTEN_FDS)
//! is the one the resolver serves, instead of binding its own.

use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_dns::control;

#[test]
fn the_socket_systemd_passes_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    cni_dns::store::private_dir(&state).unwrap();
    let socket = state.join("dnsd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&socket).unwrap());
    let mut command = Command::new("sh");
    command
        .args(["-c", "export LISTEN_PID=$$ LISTEN_FDS=1; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_cni-dnsd"))
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cni_os::process::pass_as_fd3_on_spawn(&mut command, listener.into());
    let mut child = command.spawn().unwrap();
    // The resolver owns its copy now; ours (held by the command) must not keep it open.
    drop(command);
    let started = Instant::now();
    let status = loop {
        match control::request(&socket, "status", Duration::from_secs(2)) {
            Ok(status) => break status,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!("no answer: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.contains(&format!("pid={}", child.id())), "{status}");
    // The resolver used the passed socket: the file is the one bound here.
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&socket).unwrap()), inode);
}
