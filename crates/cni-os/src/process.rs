//! Processes: signalling them, watching them end, their limits, and what a child does
//! between `fork` and `exec` (the hooks std only offers as `unsafe` `pre_exec`). Each
//! hook here calls async-signal-safe system calls only and allocates nothing, which is
//! what makes running it in the forked child sound.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

pub use rustix::process::Signal;

fn pid(raw: u32) -> io::Result<rustix::process::Pid> {
    i32::try_from(raw)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{raw} is not a process id")))
}

/// Sends `signal` to process `pid`.
pub fn kill(pid_raw: u32, signal: Signal) -> io::Result<()> {
    Ok(rustix::process::kill_process(pid(pid_raw)?, signal)?)
}

/// Sends `signal` to every process of group `pgid` (a child started with
/// `CommandExt::process_group(0)` leads the group of its own pid).
pub fn kill_group(pgid: u32, signal: Signal) -> io::Result<()> {
    Ok(rustix::process::kill_process_group(pid(pgid)?, signal)?)
}

/// Whether process `pid` exists (a zombie still does); a process of another user that
/// we may not signal exists too.
pub fn exists(pid_raw: u32) -> bool {
    match pid(pid_raw) {
        Ok(p) => !matches!(rustix::process::test_kill_process(p), Err(rustix::io::Errno::SRCH)),
        Err(_) => false,
    }
}

/// A descriptor that becomes readable when process `pid` ends (`pidfd_open(2)`, Linux
/// 5.3): an exit can then be waited for with poll, together with pipes.
pub fn pidfd(pid_raw: u32) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(pid(pid_raw)?, rustix::process::PidfdFlags::empty())?)
}

/// A resource limit [`hard_limit`] reads.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// Open files (`RLIMIT_NOFILE`).
    OpenFiles,
    /// Processes of the user (`RLIMIT_NPROC`).
    Processes,
}

/// The hard (maximum) value of `limit` for this process; `u64::MAX` when unlimited.
pub fn hard_limit(limit: Limit) -> u64 {
    let resource = match limit {
        Limit::OpenFiles => rustix::process::Resource::Nofile,
        Limit::Processes => rustix::process::Resource::Nproc,
    };
    rustix::process::getrlimit(resource).maximum.unwrap_or(u64::MAX)
}

/// How a reaped child ended and the most memory it held.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    /// The raw wait status (`WIFEXITED` and friends decode it; std's
    /// `ExitStatusExt::from_raw` turns it into an `ExitStatus`).
    pub status: i32,
    /// Its peak resident set, in KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
}

/// Waits for child `pid` (not yet reaped by anyone, std's `Child::wait` included) and
/// returns its status with its resource usage (`wait4(2)`, which rustix does not offer).
pub fn wait_with_usage(pid_raw: u32) -> io::Result<Reaped> {
    let pid = pid(pid_raw)?.as_raw_nonzero().get();
    let mut status = 0;
    // SAFETY: rusage is plain data for which all-zero bytes are a valid value.
    #[allow(unsafe_code)]
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and usage are live, writable locals of the types wait4 fills.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            return Ok(Reaped { status, max_rss_kib: usage.ru_maxrss.max(0) as u64 });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Makes the process `command` starts a daemon of its own: a new session (no controlling
/// terminal, no signals meant for our group), and a second fork, so `spawn` returns once
/// an intermediate child has exited (reap it with `wait`) while the daemon, orphaned,
/// belongs to init and is never our zombie.
pub fn detach_on_spawn(command: &mut Command) -> &mut Command {
    // SAFETY: between fork and exec the closure calls only setsid, fork and _exit, all
    // async-signal-safe; it allocates nothing. The intermediate child leaves with _exit, so
    // no destructor or atexit handler of the parent runs twice.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => Ok(()),
                _ => libc::_exit(0),
            }
        })
    }
}

/// Makes the process `command` starts enter the network namespace `ns` (a descriptor of
/// a `/proc/<pid>/ns/net` or a bind-mounted namespace file) before it executes. The
/// command owns `ns` from here on.
pub fn enter_netns_on_spawn(command: &mut Command, ns: OwnedFd) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and only calls setns,
    // which is async-signal-safe; it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Makes the process `command` starts get a UTS namespace (host and domain name) of its
/// own, a copy of ours.
pub fn unshare_uts_on_spawn(command: &mut Command) -> &mut Command {
    // SAFETY: unshare(2) is async-signal-safe and changes only the child.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUTS) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Makes the process `command` starts receive SIGKILL when the thread that spawned it
/// ends, so a test killed from outside leaves no daemon behind.
pub fn die_with_parent_on_spawn(command: &mut Command) -> &mut Command {
    // SAFETY: prctl with integer arguments is async-signal-safe and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Gives the process `command` starts `listener` as descriptor 3, inherited across exec,
/// as systemd's socket activation does (the caller sets `LISTEN_PID`/`LISTEN_FDS`).
pub fn pass_as_fd3_on_spawn(command: &mut Command, listener: OwnedFd) -> &mut Command {
    // SAFETY: dup2 and fcntl are async-signal-safe and allocate nothing. They make the
    // listener fd 3 in the child without close-on-exec (dup2 onto itself would keep the
    // flag, hence the fcntl in every case).
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            let fd = listener.as_raw_fd();
            if fd != 3 && libc::dup2(fd, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Waits (up to 10 s) for process `pid`, killed, to be gone: it no longer exists, or it is
/// a zombie its new parent has not reaped yet. Whether it did.
#[cfg(test)]
pub(crate) fn ended(pid: u32) -> bool {
    let running = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        !stat.is_empty() && !stat.contains(") Z ")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    !running()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    #[test]
    fn a_group_kill_ends_the_child_and_its_children() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 60 & echo $!; wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(exists(grandchild));
        kill_group(child.id(), Signal::KILL).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        // The grandchild was killed too; once init reaps it, it is gone.
        assert!(ended(grandchild), "grandchild {grandchild} still running");
    }

    #[test]
    fn a_pidfd_becomes_readable_when_the_process_ends() {
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        let fd = pidfd(child.id()).unwrap();
        assert!(!crate::poll::readable(&fd, std::time::Duration::ZERO).unwrap());
        kill(child.id(), Signal::TERM).unwrap();
        assert!(crate::poll::readable(&fd, std::time::Duration::from_secs(30)).unwrap());
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by wait_with_usage, which clippy cannot see
    fn waiting_with_usage_reports_the_status_and_the_memory_touched() {
        // 16 MiB touched by the child shows in its peak resident set.
        let child = Command::new("sh")
            .args(["-c", "head -c 16777216 /dev/zero | tr '\\0' x > /dev/null; v=$(head -c 16777216 /dev/zero | tr '\\0' x); exit 3"])
            .spawn()
            .unwrap();
        let reaped = wait_with_usage(child.id()).unwrap();
        let status = std::process::ExitStatus::from_raw(reaped.status);
        assert_eq!(status.code(), Some(3));
        assert!(reaped.max_rss_kib > 0);
    }

    #[test]
    fn a_detached_daemon_is_not_our_child() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let mut command = Command::new("sh");
        command.args(["-c", "echo $$ > \"$0\"; exec sleep 60"]).arg(&pid_file);
        let mut launcher = detach_on_spawn(&mut command).spawn().unwrap();
        assert!(launcher.wait().unwrap().success(), "the intermediate child exits at once");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let daemon: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok()) {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the daemon never wrote its pid");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let parent_and_session = |pid: &str| -> (u32, u32) {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
            (fields[1].parse().unwrap(), fields[3].parse().unwrap())
        };
        let (parent, session) = parent_and_session(&daemon.to_string());
        assert_ne!(parent, std::process::id(), "reparented away from us");
        assert_ne!(session, parent_and_session("self").1, "in a session of its own");
        // Not the session's leader (the intermediate child was): it can never acquire a
        // controlling terminal.
        assert_ne!(session, daemon);
        kill(daemon, Signal::KILL).unwrap();
    }

    #[test]
    fn a_passed_listener_is_fd_3_in_the_child() {
        let listener = std::os::unix::net::UnixListener::bind(tempfile::tempdir().unwrap().path().join("s"));
        let listener = OwnedFd::from(listener.unwrap());
        let mut command = Command::new("sh");
        command.args(["-c", "readlink /proc/self/fd/3"]).stdout(Stdio::piped());
        let output = pass_as_fd3_on_spawn(&mut command, listener).output().unwrap();
        assert!(String::from_utf8_lossy(&output.stdout).starts_with("socket:"), "{output:?}");
    }

    #[test]
    fn limits_and_bad_pids() {
        assert!(hard_limit(Limit::OpenFiles) >= 1024);
        assert!(kill(0, Signal::TERM).is_err(), "pid 0 (our group) is not a process id");
        assert!(kill(u32::MAX, Signal::TERM).is_err());
        assert!(!exists(0));
    }
}
