//! Background processes `setup` starts: the DHCP lease daemon of a `ipam.type: dhcp`
//! network.
//!
//! The daemon must outlive `setup` (the host waits for `setup` to exit, with a limit) and
//! must not hold `setup`'s stdout/stderr open (the host reads them to the end), so it is
//! started with a double fork: the child makes itself a session leader and forks again;
//! the grandchild execs the daemon with its output going to a log file, and the child
//! exits at once, so the daemon is re-parented away from `setup`. A second `setup` (after
//! a host restart) finds it answering on its socket and leaves it alone, or starts a new
//! one when it died. A lock file serialises concurrent `setup`s.

use crate::ops::{in_network, Network};
use crate::settings::{Settings, DAEMON_START_LIMIT};
use cni_types::{CniError, ErrorCode};
use std::fs::{File, OpenOptions};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The dhcp plugin's default socket (`ipam.daemonSocketPath` overrides it).
pub const DEFAULT_DHCP_SOCKET: &str = "/run/cni/dhcp.sock";

/// What a network needs running in the background, if anything.
pub fn needs_daemon(network: &Network) -> Option<PathBuf> {
    if network.ipam_type() != Some("dhcp") {
        return None;
    }
    let ipam = network.conf.conf.get("ipam")?;
    let socket = ipam.get("daemonSocketPath").and_then(|v| v.as_str()).unwrap_or(DEFAULT_DHCP_SOCKET);
    Some(PathBuf::from(socket))
}

/// Makes sure the DHCP daemon answers on `socket`, starting it when it does not.
pub fn ensure_dhcp_daemon(network: &Network, settings: &Settings, socket: &Path) -> Result<(), CniError> {
    let io_error =
        |what: String, e: std::io::Error| in_network(network.name(), CniError::io(format!("{what}: {e}")));
    let dir = settings.dhcp_dir();
    std::fs::create_dir_all(&dir).map_err(|e| io_error(format!("creating {}", dir.display()), e))?;
    let _lock = lock(&settings.state_dir.join("setup.lock"))
        .map_err(|e| io_error("taking the setup lock".into(), e))?;
    if UnixStream::connect(socket).is_ok() {
        return Ok(());
    }
    let binary = network.cni.find_plugin("dhcp").map_err(|e| network.error(e))?;
    let log_path = dir.join("daemon.log");
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| io_error(format!("opening {}", log_path.display()), e))?;
    let log_err = log.try_clone().map_err(|e| io_error("duplicating the log descriptor".into(), e))?;
    let mut command = Command::new(&binary);
    command
        .arg0("dhcp")
        .arg("daemon")
        .arg("-socketpath")
        .arg(socket)
        .arg("-statedir")
        .arg(&dir)
        .arg("-pidfile")
        .arg(dir.join("daemon.pid"))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    cni_os::process::detach_on_spawn(&mut command);
    let mut intermediate =
        command.spawn().map_err(|e| io_error(format!("starting {}", binary.display()), e))?;
    intermediate.wait().map_err(|e| io_error("waiting for the daemon's launcher".into(), e))?;
    wait_until_answering(socket, DAEMON_START_LIMIT).map_err(|waited| {
        let tail = log_tail(&log_path);
        in_network(
            network.name(),
            CniError::new(
                ErrorCode::NotAvailable,
                format!("the DHCP daemon did not answer on {} within {waited:?}", socket.display()),
            )
            .with_details(format!("{}: {tail}", log_path.display())),
        )
    })
}

fn wait_until_answering(socket: &Path, limit: Duration) -> Result<(), Duration> {
    let start = Instant::now();
    loop {
        if UnixStream::connect(socket).is_ok() {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(limit);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last lines of the daemon's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// An exclusive `flock` held until the file is dropped.
fn lock(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    cni_os::lock::exclusive(&file)?;
    Ok(file)
}
