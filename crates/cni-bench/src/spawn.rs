//! Running one plugin process directly (without libcni), timed from fork to reaping, with
//! the kernel's resource accounting of it (`wait4`).
//!
//! A catch with `ru_maxrss`: exec records the peak RSS of the address space it replaces,
//! and a child of this (large) process starts with a copy of ours (or, spawned with vfork,
//! ours itself). So any child of ours reports at least our own peak, and so does every
//! process it execs. [`peak_rss`] therefore has the plugin started by a small process
//! that reports its child's `ru_maxrss`: GNU time (`/usr/bin/time`, Debian package
//! `time`). The figure is then the larger of the plugin tree's own peak and time's (see
//! [`peak_rss_floor_kib`]).

use crate::error::{BenchError, Result};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How one process run went.
#[derive(Debug)]
pub struct ProcessRun {
    pub elapsed: Duration,
    pub success: bool,
    pub stdout: Vec<u8>,
    /// Peak resident set of the process and of its reaped children (a delegated IPAM
    /// plugin), in KiB; only from [`peak_rss`] is it the plugin's (see the module comment).
    pub max_rss_kib: u64,
}

impl ProcessRun {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().chars().take(400).collect()
    }
}

/// GNU time: reports the peak RSS of the command it runs.
const GNU_TIME: &str = "/usr/bin/time";

/// Runs `binary` with only `env` as its environment (plus PATH) and `stdin` as input.
/// `max_rss_kib` is not meaningful here (see the module comment): use [`peak_rss`].
pub fn run_process(binary: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<ProcessRun> {
    run(Command::new(binary), binary, env, stdin)
}

/// Like [`run_process`], with a meaningful `max_rss_kib` (the peak of the process and its
/// children), measured by GNU time; `None` when `/usr/bin/time` is not installed.
/// `elapsed` includes time's own start.
pub fn peak_rss(binary: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<Option<ProcessRun>> {
    if !Path::new(GNU_TIME).is_file() {
        return Ok(None);
    }
    let report = tempfile::NamedTempFile::new().map_err(|e| BenchError::io("create temp file", e))?;
    let mut command = Command::new(GNU_TIME);
    // The plugin's argv[0] stays its own path (the multi-call binary dispatches on it).
    command.arg("-f").arg("%M").arg("-o").arg(report.path()).arg("--").arg(binary);
    let mut outcome = run(command, binary, env, stdin)?;
    let text = std::fs::read_to_string(report.path()).map_err(|e| BenchError::io("read time's report", e))?;
    // A failed command adds a "Command exited with non-zero status" line first.
    outcome.max_rss_kib = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| BenchError::Plugin(format!("cannot parse GNU time's report {text:?}")))?;
    Ok(Some(outcome))
}

/// What [`peak_rss`] reports for `/bin/true`: below this, it cannot tell.
pub fn peak_rss_floor_kib() -> Result<Option<u64>> {
    Ok(peak_rss(Path::new("/bin/true"), &[], b"")?.map(|run| run.max_rss_kib))
}

fn run(mut command: Command, binary: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<ProcessRun> {
    let context = || format!("run {}", binary.display());
    let started = Instant::now();
    let mut child = command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::io(context(), e))?;
    if let Some(mut pipe) = child.stdin.take() {
        // Requests are far smaller than a pipe buffer, so this never blocks; a process
        // that exits without reading (like /bin/true) makes it fail with EPIPE: ignored.
        let _ = pipe.write_all(stdin);
    }
    let mut stdout = Vec::new();
    if let Some(mut pipe) = child.stdout.take() {
        pipe.read_to_end(&mut stdout).map_err(|e| BenchError::io(context(), e))?;
    }
    // std's Child never waited for it, so it is ours to reap, with its resource usage.
    let reaped = cni_os::process::wait_with_usage(child.id()).map_err(|e| BenchError::io(context(), e))?;
    let elapsed = started.elapsed();
    let success = libc::WIFEXITED(reaped.status) && libc::WEXITSTATUS(reaped.status) == 0;
    Ok(ProcessRun { elapsed, success, stdout, max_rss_kib: reaped.max_rss_kib })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_process_and_reports_status_output_and_rss() {
        let run = run_process(Path::new("/bin/cat"), &[("X", "1")], b"hello").unwrap();
        assert!(run.success);
        assert_eq!(run.stdout, b"hello");
        assert!(run.max_rss_kib > 0);
        let failed = run_process(Path::new("/bin/false"), &[], b"").unwrap();
        assert!(!failed.success);
        assert!(run_process(Path::new("/nonexistent/plugin"), &[], b"").is_err());
    }

    #[test]
    fn peak_rss_measures_the_child_not_us() {
        assert!(Path::new(GNU_TIME).is_file(), "this test needs GNU time (Debian package `time`)");
        // Grow our own peak well above any small tool's.
        let ballast = std::hint::black_box(vec![1u8; 64 << 20]);
        let direct = run_process(Path::new("/bin/true"), &[], b"").unwrap();
        assert!(direct.max_rss_kib > 60 << 10, "a direct child inherits our peak: {}", direct.max_rss_kib);
        let measured = peak_rss(Path::new("/bin/cat"), &[("A", "1")], b"via time").unwrap().unwrap();
        assert!(measured.success);
        assert_eq!(measured.stdout, b"via time");
        assert!(measured.max_rss_kib > 0 && measured.max_rss_kib < 16 << 10, "{} KiB", measured.max_rss_kib);
        let failed = peak_rss(Path::new("/bin/false"), &[], b"").unwrap().unwrap();
        assert!(!failed.success && failed.max_rss_kib > 0);
        assert!(peak_rss_floor_kib().unwrap().unwrap() < 16 << 10);
        drop(ballast);
    }
}
