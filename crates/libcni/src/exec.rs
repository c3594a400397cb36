//! Finding and running plugin binaries.
//!
//! A plugin runs in its own process group so that, on timeout, it and everything it
//! started can be killed together. Its stdin is written and its stdout/stderr read by one
//! poll loop on the calling thread (non-blocking pipes, and a pidfd for the exit), so a
//! plugin that never reads its input, or a child that keeps the output pipes open after
//! the plugin exited, can never hang the caller — and no thread is started per plugin.

use crate::error::{Error, Result};
use cni_types::trace::TRACE_VARS;
use cni_types::validate::validate_plugin_type;
use cni_types::CniError;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
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
        let mut command = self.command();
        let mut child = self.spawn_retrying_busy(&mut command)?;
        let mut io = PluginIo::new(&mut child, self.stdin);
        let pidfd = cni_os::process::pidfd(child.id()).ok();

        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => {
                    kill_group_and_reap(&mut child);
                    return Err(Error::io(format!("waiting for plugin {:?}", self.plugin_type), e));
                }
            }
            let now = Instant::now();
            if now >= self.deadline {
                kill_group_and_reap(&mut child);
                return Err(Error::Timeout {
                    plugin_type: self.plugin_type.to_string(),
                    command: self.command.to_string(),
                    timeout: self.timeout,
                });
            }
            io.poll(pidfd.as_ref(), self.deadline - now);
        };
        let grace = Instant::now() + PIPE_GRACE;
        while io.output_open() {
            let now = Instant::now();
            if now >= grace {
                break;
            }
            io.poll(None, grace - now);
        }
        let (stdout, stderr) = (io.stdout.buffer, io.stderr.buffer);
        if status.success() {
            return Ok(stdout);
        }
        Err(self.failure(status, &stdout, &stderr))
    }

    /// The process to start: this process's environment without the variables libcni
    /// sets itself, then this run's; in its own process group, with piped stdio.
    fn command(&self) -> Command {
        let mut command = Command::new(self.binary);
        for var in CNI_VARS {
            command.env_remove(var);
        }
        // A context the runtime hands over replaces the one this process inherited as a
        // whole: an inherited TRACESTATE or BAGGAGE belongs to another trace.
        if self.env.iter().any(|(key, _)| *key == "TRACEPARENT") {
            for var in TRACE_VARS {
                command.env_remove(var);
            }
        }
        command
            .envs(self.env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }

    fn spawn_retrying_busy(&self, command: &mut Command) -> Result<Child> {
        let mut pause = Duration::from_millis(5);
        loop {
            match command.spawn() {
                Ok(child) => return Ok(child),
                // ETXTBSY: the binary is being written (an install in progress, or another
                // thread forked while holding it open for writing). It clears quickly.
                Err(e)
                    if e.kind() == ErrorKind::ExecutableFileBusy
                        && Instant::now() + pause < self.deadline =>
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
    let _ = cni_os::process::kill_group(child.id(), cni_os::process::Signal::KILL);
    let _ = child.wait();
}

/// A plugin's stdin being written and its stdout and stderr being read, without blocking.
struct PluginIo<'a> {
    stdin: Option<ChildStdin>,
    input: &'a [u8],
    stdout: Output<ChildStdout>,
    stderr: Output<ChildStderr>,
}

/// An output pipe and what came out of it so far; `pipe` is `None` once it closed.
struct Output<P> {
    pipe: Option<P>,
    buffer: Vec<u8>,
}

impl<P: Read + AsFd> Output<P> {
    fn new(pipe: Option<P>) -> Output<P> {
        if let Some(p) = &pipe {
            set_nonblocking(p);
        }
        Output { pipe, buffer: Vec::new() }
    }

    /// Reads what is there; closes the pipe at its end (or on an error).
    fn read_available(&mut self) {
        let Some(pipe) = &mut self.pipe else { return };
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.pipe = None;
    }
}

impl<'a> PluginIo<'a> {
    fn new(child: &mut Child, input: &'a [u8]) -> PluginIo<'a> {
        let stdin = child.stdin.take();
        if let Some(pipe) = &stdin {
            set_nonblocking(pipe);
        }
        let mut io = PluginIo {
            stdin,
            input,
            stdout: Output::new(child.stdout.take()),
            stderr: Output::new(child.stderr.take()),
        };
        io.write_available();
        io
    }

    fn output_open(&self) -> bool {
        self.stdout.pipe.is_some() || self.stderr.pipe.is_some()
    }

    /// Writes what the pipe takes; closes it when all is written, or when the plugin
    /// stopped reading (EPIPE: a plugin need not read its input).
    fn write_available(&mut self) {
        let Some(pipe) = &mut self.stdin else { return };
        while !self.input.is_empty() {
            match pipe.write(self.input) {
                Ok(n) => self.input = &self.input[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.stdin = None;
    }

    /// Waits up to `timeout` for a pipe to be ready or `exit` (a pidfd) to signal, then
    /// moves whatever data can move.
    fn poll(&mut self, exit: Option<&OwnedFd>, timeout: Duration) {
        use cni_os::poll::{PollFd, PollFlags};
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        if let Some(pipe) = &self.stdin {
            fds.push(PollFd::new(pipe, PollFlags::OUT));
        }
        let outputs =
            [self.stdout.pipe.as_ref().map(AsFd::as_fd), self.stderr.pipe.as_ref().map(AsFd::as_fd)];
        for pipe in outputs.into_iter().flatten() {
            fds.push(PollFd::from_borrowed_fd(pipe, PollFlags::IN));
        }
        if let Some(exit) = exit {
            fds.push(PollFd::new(exit, PollFlags::IN));
        }
        // Without a pidfd (old kernels) the exit is noticed by polling every 5 ms.
        let timeout = if exit.is_some() { timeout } else { timeout.min(Duration::from_millis(5)) };
        // Whatever poll says, everything is tried below: a failed wait costs a spin only.
        let _ = cni_os::poll::wait(&mut fds, timeout.max(Duration::from_millis(1)));
        drop(fds);
        self.write_available();
        self.stdout.read_available();
        self.stderr.read_available();
    }
}

fn set_nonblocking(fd: impl AsFd) {
    // A pipe left blocking would only make this loop wait in read or write for the plugin
    // instead of in poll: still bounded by the plugin's exit, so the error is not fatal.
    let _ = cni_os::poll::set_nonblocking(fd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn run_with_env(env: Vec<(&'static str, String)>) -> Vec<(String, Option<String>)> {
        let run = PluginRun {
            plugin_type: "p",
            binary: Path::new("/bin/true"),
            command: "ADD",
            env,
            stdin: b"",
            deadline: Instant::now(),
            timeout: Duration::ZERO,
        };
        let text = |s: &OsStr| s.to_string_lossy().into_owned();
        run.command().get_envs().map(|(k, v)| (text(k), v.map(text))).collect()
    }

    #[test]
    fn a_trace_context_given_replaces_the_inherited_one_whole() {
        let envs = run_with_env(vec![(
            "TRACEPARENT",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        )]);
        let find = |key: &str| envs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        assert_eq!(
            find("TRACEPARENT"),
            Some(Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()))
        );
        // Removed from what the plugin inherits, so a stale state cannot join the new trace.
        assert_eq!(find("TRACESTATE"), Some(None));
        assert_eq!(find("BAGGAGE"), Some(None));
    }

    #[test]
    fn without_a_trace_context_the_inherited_one_passes_through() {
        let envs = run_with_env(vec![("CNI_COMMAND", "ADD".into())]);
        assert!(envs.iter().all(|(k, _)| !TRACE_VARS.contains(&k.as_str())), "{envs:?}");
        // libcni's own variables are always cleared before this run's are set.
        assert!(envs.iter().any(|(k, v)| k == "CNI_NETNS" && v.is_none()), "{envs:?}");
    }
}
