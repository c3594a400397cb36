//! Finding and running plugin binaries.
//!
//! A plugin runs in its own process group so that, on timeout, it and everything it
//! started can be killed together. Its stdin is written and its stdout/stderr read on
//! helper threads, so a plugin that never reads its input, or a child that keeps the
//! output pipes open after the plugin exited, can never hang the caller.

use crate::error::{Error, Result};
use cni_types::validate::validate_plugin_type;
use cni_types::CniError;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The variables libcni sets itself; inherited values of these never reach a plugin.
pub(crate) const CNI_VARS: [&str; 6] =
    ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"];

/// How long to wait for output pipes to close after the plugin itself exited (a child it
/// left behind may hold them open).
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// Finds plugin `plugin_type`: the first regular file of that name in `dirs`, in order.
/// Names that could escape the directories (paths, `..`, empty) are refused.
pub fn find_plugin(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf> {
    validate_plugin_type(plugin_type).map_err(Error::InvalidPluginType)?;
    dirs.iter()
        .map(|dir| dir.join(plugin_type))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| m.is_file()))
        .ok_or_else(|| Error::PluginNotFound { plugin_type: plugin_type.to_string(), dirs: dirs.to_vec() })
}

/// One plugin invocation.
pub(crate) struct PluginRun<'a> {
    pub plugin_type: &'a str,
    pub binary: &'a Path,
    pub command: &'a str,
    /// CNI_* variables for this verb; the rest of the environment is inherited.
    pub env: Vec<(&'static str, String)>,
    pub stdin: &'a [u8],
    /// When the whole operation must be over.
    pub deadline: Instant,
    /// The operation's time limit, for the error message.
    pub timeout: Duration,
}

impl PluginRun<'_> {
    /// Runs the plugin; its stdout on success, its error otherwise.
    pub fn run(&self) -> Result<Vec<u8>> {
        let mut command = Command::new(self.binary);
        for var in CNI_VARS {
            command.env_remove(var);
        }
        command
            .envs(self.env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = self.spawn_retrying_busy(&mut command)?;

        let input = self.stdin.to_vec();
        if let Some(mut pipe) = child.stdin.take() {
            // Detached: a plugin that exits without reading closes the pipe (EPIPE), and
            // one that hangs is killed below, which also ends this write.
            std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            });
        }
        let stdout = PipeReader::spawn(child.stdout.take());
        let stderr = PipeReader::spawn(child.stderr.take());

        let status = match wait_until(&mut child, self.deadline) {
            Ok(Some(status)) => status,
            Ok(None) => {
                kill_group_and_reap(&mut child);
                return Err(Error::Timeout {
                    plugin_type: self.plugin_type.to_string(),
                    command: self.command.to_string(),
                    timeout: self.timeout,
                });
            }
            Err(e) => {
                kill_group_and_reap(&mut child);
                return Err(Error::io(format!("waiting for plugin {:?}", self.plugin_type), e));
            }
        };
        let grace = Instant::now() + PIPE_GRACE;
        let stdout = stdout.collect(grace);
        let stderr = stderr.collect(grace);
        if status.success() {
            return Ok(stdout);
        }
        Err(self.failure(status, &stdout, &stderr))
    }

    fn spawn_retrying_busy(&self, command: &mut Command) -> Result<Child> {
        let mut pause = Duration::from_millis(5);
        loop {
            match command.spawn() {
                Ok(child) => return Ok(child),
                // ETXTBSY: the binary is being written (an install in progress, or another
                // thread forked while holding it open for writing). It clears quickly.
                Err(e)
                    if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() + pause < self.deadline =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(source) => {
                    return Err(Error::Spawn {
                        plugin_type: self.plugin_type.to_string(),
                        path: self.binary.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }

    /// The error for a failed run: the plugin's error object when stdout holds one,
    /// otherwise what it printed (stderr if stdout is empty).
    fn failure(&self, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Error {
        if let Ok(error) = serde_json::from_slice::<CniError>(stdout) {
            return Error::Plugin {
                plugin_type: self.plugin_type.to_string(),
                command: self.command.to_string(),
                error: Box::new(error),
            };
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        let output = match (stdout.is_empty(), stderr.is_empty()) {
            (true, true) => "no output".to_string(),
            (true, false) => text(stderr),
            (false, true) => format!("stdout is not a CNI error object: {:?}", text(stdout)),
            (false, false) => {
                format!("stdout is not a CNI error object: {:?}; stderr: {}", text(stdout), text(stderr))
            }
        };
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => status.to_string(),
        };
        Error::PluginFailed {
            plugin_type: self.plugin_type.to_string(),
            command: self.command.to_string(),
            status,
            output,
        }
    }
}

/// Kills the plugin's whole process group, then reaps the plugin. The plugin is not yet
/// reaped when this is called, so its pid (= the group id) cannot have been reused.
fn kill_group_and_reap(child: &mut Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill(2) with a negative pid signals the process group we created for this
    // child; it has no memory-safety preconditions.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.wait();
}

/// Waits for the child to exit until `deadline`; `None` when the deadline passed first.
fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    let pidfd = pidfd_open(child.id());
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let remaining = deadline - now;
        match &pidfd {
            Some(fd) => wait_readable(fd, remaining),
            // Without pidfds (old kernels) fall back to polling.
            None => std::thread::sleep(remaining.min(Duration::from_millis(5))),
        }
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits until a pidfd becomes readable (the process exited) or `timeout` passes.
fn wait_readable(fd: &OwnedFd, timeout: Duration) {
    let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: pollfd is one valid, initialised element.
    unsafe {
        libc::poll(&mut pollfd, 1, millis);
    }
}

/// Reads a pipe to its end on a helper thread.
struct PipeReader {
    buffer: Arc<Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
}

impl PipeReader {
    fn spawn(pipe: Option<impl Read + Send + 'static>) -> PipeReader {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let shared = buffer.clone();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            shared.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&chunk[..n])
                        }
                    }
                }
                let _ = tx.send(());
            });
        }
        PipeReader { buffer, done }
    }

    /// What was read, once the pipe closed or `until` passed (whichever is first).
    fn collect(self, until: Instant) -> Vec<u8> {
        let _ = self.done.recv_timeout(until.saturating_duration_since(Instant::now()));
        std::mem::take(&mut *self.buffer.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
