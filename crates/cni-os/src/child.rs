//! A child process run to its end under a deadline.
//!
//! [`finish`] takes a spawned child, writes its stdin and reads its stdout and stderr in
//! one poll loop on the calling thread (non-blocking pipes, a pidfd for the exit): no
//! thread per child, and nothing the child does can hang the caller past the deadline —
//! not reading its input, filling a pipe, or leaving a grandchild that holds the output
//! pipes open after it exited (those are read for a short grace, then let go).
//!
//! At the deadline the child's whole process group is killed (a child started through
//! [`prepare`] leads its own group, so everything it started dies with it) and the child
//! is reaped. Captured output is capped per stream; what comes beyond the cap is read and
//! dropped, so a child spewing output can neither block on a full pipe nor exhaust memory.

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::poll::{PollFd, PollFlags};
use crate::process::{kill, kill_group, Signal};

/// How long output pipes are still read after the child exited: a process it left behind
/// may hold them open, and is not waited for longer.
pub const PIPE_GRACE: Duration = Duration::from_millis(500);

/// The default cap on each captured stream (stdout, stderr).
pub const DEFAULT_OUTPUT_CAP: usize = 16 << 20;

/// When the child must be over, and how much of its output is kept.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Instant,
    /// Bytes kept of each of stdout and stderr; the rest is read and dropped.
    pub output_cap: usize,
}

impl Limits {
    /// A deadline, with [`DEFAULT_OUTPUT_CAP`].
    pub fn new(deadline: Instant) -> Limits {
        Limits { deadline, output_cap: DEFAULT_OUTPUT_CAP }
    }

    /// Keeps at most `bytes` of each output stream.
    pub fn output_cap(self, bytes: usize) -> Limits {
        Limits { output_cap: bytes, ..self }
    }
}

/// How a child ended and what it printed (each stream cut at the cap).
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output of stdout was dropped because it passed the cap.
    pub stdout_truncated: bool,
    /// Output of stderr was dropped because it passed the cap.
    pub stderr_truncated: bool,
}

/// Why [`finish`] or [`run`] returned no normal end.
#[derive(Debug)]
pub enum Error {
    /// The child could not be started.
    Spawn(io::Error),
    /// Waiting for the child failed; it was killed (with its group) and reaped.
    Wait(io::Error),
    /// The deadline passed: the child's group was killed and the child reaped. Holds what
    /// it printed until then and the status it was reaped with (SIGKILL, unless it exited
    /// by itself in the instant before the kill).
    Timeout(Finished),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Spawn(e) => write!(f, "cannot start the process: {e}"),
            Error::Wait(e) => write!(f, "waiting for the process failed: {e}"),
            Error::Timeout(_) => write!(f, "the process did not finish before its deadline and was killed"),
        }
    }
}

impl std::error::Error for Error {}

/// Pipes `command`'s stdin, stdout and stderr and starts it in a process group of its
/// own, so that [`finish`] can kill everything it starts at the deadline.
pub fn prepare(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0)
}

/// [`prepare`]s and spawns `command`, then [`finish`]es it.
pub fn run(command: &mut Command, stdin: &[u8], limits: &Limits) -> Result<Finished, Error> {
    let child = prepare(command).spawn().map_err(Error::Spawn)?;
    finish(child, stdin, limits)
}

/// Runs a spawned `child` to its end: writes `stdin` to it (if its stdin is piped), reads
/// its piped stdout and stderr, and returns how it ended; kills it at the deadline.
///
/// Streams that are not piped are left alone. A child that leads its own process group
/// (see [`prepare`]) is killed with its whole group, any other child alone.
pub fn finish(mut child: Child, stdin: &[u8], limits: &Limits) -> Result<Finished, Error> {
    let mut io = ChildIo::new(&mut child, stdin, limits.output_cap);
    let pidfd = crate::process::pidfd(child.id()).ok();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(Error::Wait(e));
            }
        }
        let now = Instant::now();
        if now >= limits.deadline {
            let status = kill_and_reap(&mut child);
            io.read_available();
            return Err(Error::Timeout(io.finished(status)));
        }
        io.poll(pidfd.as_ref(), limits.deadline - now);
    };
    let grace = Instant::now() + PIPE_GRACE;
    while io.output_open() {
        let now = Instant::now();
        if now >= grace {
            break;
        }
        io.poll(None, grace - now);
    }
    Ok(io.finished(status))
}

/// Kills the child's process group (or the child alone when it leads none), then reaps
/// the child. It is not reaped yet, so its pid cannot have been reused: a group of that
/// id can only be the one it leads.
fn kill_and_reap(child: &mut Child) -> ExitStatus {
    if kill_group(child.id(), Signal::KILL).is_err() {
        let _ = kill(child.id(), Signal::KILL);
    }
    // Waiting cannot fail for our own unreaped child (std retries EINTR); should it,
    // report what was done to it.
    child.wait().unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(libc::SIGKILL))
}

/// A child's stdin being written and its stdout and stderr being read, without blocking.
struct ChildIo<'a> {
    stdin: Option<ChildStdin>,
    input: &'a [u8],
    stdout: Output<ChildStdout>,
    stderr: Output<ChildStderr>,
}

/// An output pipe and what was kept of it so far; `pipe` is `None` once it closed.
struct Output<P> {
    pipe: Option<P>,
    buffer: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl<P: Read + AsFd> Output<P> {
    fn new(pipe: Option<P>, cap: usize) -> Output<P> {
        if let Some(p) = &pipe {
            set_nonblocking(p);
        }
        Output { pipe, buffer: Vec::new(), cap, truncated: false }
    }

    /// Reads what is there, keeping up to the cap; closes the pipe at its end (or on an
    /// error).
    fn read_available(&mut self) {
        let Some(pipe) = &mut self.pipe else { return };
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    let keep = n.min(self.cap - self.buffer.len());
                    self.buffer.extend_from_slice(&chunk[..keep]);
                    self.truncated |= keep < n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.pipe = None;
    }
}

impl<'a> ChildIo<'a> {
    fn new(child: &mut Child, input: &'a [u8], cap: usize) -> ChildIo<'a> {
        let stdin = child.stdin.take();
        if let Some(pipe) = &stdin {
            set_nonblocking(pipe);
        }
        let mut io = ChildIo {
            stdin,
            input,
            stdout: Output::new(child.stdout.take(), cap),
            stderr: Output::new(child.stderr.take(), cap),
        };
        io.write_available();
        io
    }

    fn output_open(&self) -> bool {
        self.stdout.pipe.is_some() || self.stderr.pipe.is_some()
    }

    fn finished(self, status: ExitStatus) -> Finished {
        Finished {
            status,
            stdout_truncated: self.stdout.truncated,
            stderr_truncated: self.stderr.truncated,
            stdout: self.stdout.buffer,
            stderr: self.stderr.buffer,
        }
    }

    /// Writes what the pipe takes; closes it when all is written, or when the child
    /// stopped reading (EPIPE: a child need not read its input).
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

    fn read_available(&mut self) {
        self.stdout.read_available();
        self.stderr.read_available();
    }

    /// Waits up to `timeout` for a pipe to be ready or `exit` (a pidfd) to signal, then
    /// moves whatever data can move.
    fn poll(&mut self, exit: Option<&OwnedFd>, timeout: Duration) {
        // Without a pidfd the exit is noticed by polling every 5 ms.
        let timeout = if exit.is_some() { timeout } else { timeout.min(Duration::from_millis(5)) };
        self.wait_ready(exit, timeout);
        self.write_available();
        self.read_available();
    }

    /// Waits up to `timeout` for any open pipe, or `exit`, to be ready.
    fn wait_ready(&self, exit: Option<&OwnedFd>, timeout: Duration) {
        let mut entries = [
            self.stdin.as_ref().map(|p| PollFd::new(p, PollFlags::OUT)),
            self.stdout.pipe.as_ref().map(|p| PollFd::new(p, PollFlags::IN)),
            self.stderr.pipe.as_ref().map(|p| PollFd::new(p, PollFlags::IN)),
            exit.map(|fd| PollFd::new(fd, PollFlags::IN)),
        ]
        .into_iter()
        .flatten();
        match entries.next() {
            Some(first) => {
                // On the stack, not in a Vec: no allocation per wait. Slots past `len`
                // only fill the array and are never polled.
                let mut fds = [first.clone(), first.clone(), first.clone(), first];
                let mut len = 1;
                for entry in entries {
                    fds[len] = entry;
                    len += 1;
                }
                // Whatever poll says, everything is tried below: a failed wait costs a
                // spin only.
                let _ = crate::poll::wait(&mut fds[..len], timeout);
            }
            None => std::thread::sleep(timeout),
        }
    }
}

fn set_nonblocking(fd: impl AsFd) {
    // A pipe left blocking would only make the loop wait in read or write for the child
    // instead of in poll: still bounded by the child's exit, so the error is not fatal.
    let _ = crate::poll::set_nonblocking(fd);
}

#[cfg(test)]
mod tests;
