//! Finding the resolver, starting it when it is not running, and talking to it.
//!
//! The resolver is `cni-dnsd`, looked for in CNI_PATH and then next to this binary. It is
//! started detached, like the DHCP daemon: a double fork with a new session, so it outlives
//! this short-lived plugin and is not the child of the runtime, with its output appended to
//! `<stateDir>/dnsd.log`. A lock file serialises concurrent starters; whoever gets it second
//! finds the first one's resolver answering. Under systemd, `cni-dnsd.socket` holds the
//! control socket and the first request starts the service instead.

use cni_dns::control::{self, ControlError};
use cni_dns::StateDir;
use cni_sdk::{CniError, Request};
use cni_types::ErrorCode;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a request to the resolver may take (a reload reads every record).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a freshly started resolver gets to answer.
const START_LIMIT: Duration = Duration::from_secs(5);
/// The log is started afresh when it has grown past this.
const LOG_LIMIT: u64 = 1 << 20;

/// An exclusive `flock` on a file in the state directory, held until dropped.
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// The lock on the record tree, taken after making the state directory (ADD is the
    /// first writer on a fresh host).
    pub fn acquire_prepared(state: &StateDir) -> Result<StateLock, CniError> {
        cni_dns::store::private_dir(state.root()).map_err(|e| CniError::io(format!("dnsname: {e}")))?;
        StateLock::acquire(state, "state.lock")
    }

    pub fn acquire(state: &StateDir, name: &str) -> Result<StateLock, CniError> {
        let path = state.root().join(name);
        let file = cni_os::fs::open_rw_nofollow(&path, 0o600)
            .map_err(|e| CniError::io(format!("dnsname: opening {}: {e}", path.display())))?;
        cni_os::lock::exclusive(&file)
            .map_err(|e| CniError::io(format!("dnsname: locking {}: {e}", path.display())))?;
        Ok(StateLock { _file: file })
    }
}

fn not_available(msg: String) -> CniError {
    CniError::new(ErrorCode::NotAvailable, msg)
}

/// One request to a running resolver; `Ok(None)` when none is running.
pub fn ask_if_running(state: &StateDir, line: &str) -> Result<Option<String>, CniError> {
    match control::request(&state.socket_path(), line, REQUEST_TIMEOUT) {
        Ok(reply) => Ok(Some(reply)),
        Err(ControlError::NotRunning(_)) => Ok(None),
        Err(e) => Err(not_available(format!("dnsname: {e}"))),
    }
}

/// One request, starting the resolver first when it is not running.
pub fn ask(req: &Request, state: &StateDir, line: &str) -> Result<String, CniError> {
    if let Some(reply) = ask_if_running(state, line)? {
        return Ok(reply);
    }
    start(req, state)?;
    ask_if_running(state, line)?
        .ok_or_else(|| not_available("dnsname: the resolver stopped answering right after it started".into()))
}

fn find_binary(req: &Request) -> Result<PathBuf, CniError> {
    let beside_us = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.to_path_buf()));
    req.path
        .iter()
        .cloned()
        .chain(beside_us)
        .map(|dir| dir.join(cni_dns::RESOLVER_BINARY))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            not_available(format!(
                "dnsname: {} not found in CNI_PATH or next to the plugin",
                cni_dns::RESOLVER_BINARY
            ))
        })
}

fn start(req: &Request, state: &StateDir) -> Result<(), CniError> {
    let _lock = StateLock::acquire(state, "start.lock")?;
    // Another plugin may have started it while we waited for the lock.
    if control::request(&state.socket_path(), "status", REQUEST_TIMEOUT).is_ok() {
        return Ok(());
    }
    let binary = find_binary(req)?;
    let log_path = state.root().join("dnsd.log");
    let io = |what: String, e: std::io::Error| CniError::io(format!("dnsname: {what}: {e}"));
    let too_long = std::fs::symlink_metadata(&log_path).map(|m| m.len() > LOG_LIMIT).unwrap_or(false);
    let log = OpenOptions::new()
        .create(true)
        .append(!too_long)
        .write(true)
        .truncate(too_long)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&log_path)
        .map_err(|e| io(format!("opening {}", log_path.display()), e))?;
    let log_err = log.try_clone().map_err(|e| io("duplicating the log descriptor".into(), e))?;
    let mut command = Command::new(&binary);
    command
        .arg("--state-dir")
        .arg(state.root())
        .arg("--pidfile")
        .arg(state.root().join("dnsd.pid"))
        // The runtime's CNI_* variables are this plugin's, not the resolver's.
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    cni_os::process::detach_on_spawn(&mut command);
    let mut launcher = command.spawn().map_err(|e| io(format!("starting {}", binary.display()), e))?;
    launcher.wait().map_err(|e| io("waiting for the resolver's launcher".into(), e))?;
    let started = Instant::now();
    while started.elapsed() < START_LIMIT {
        if control::request(&state.socket_path(), "status", REQUEST_TIMEOUT).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    Err(not_available(format!(
        "dnsname: the resolver did not answer on {} within {START_LIMIT:?}",
        state.socket_path().display()
    ))
    .with_details(tail.into_iter().rev().collect::<Vec<_>>().join(" | ")))
}
