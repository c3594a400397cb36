//! `kill -9` at a chosen moment, and a seeded generator to choose the moments with.
//!
//! [`run_killed_after`] starts a process in a process group of its own and sends SIGKILL
//! to the whole group `after` its start, unless it exited sooner: the plugin, the IPAM
//! plugin it delegated to and any detached helper it started (they inherit the group) die
//! together, as when a runtime's cgroup is killed or the machine's OOM killer strikes.
//! Which moment of the operation that is depends on timing, so suites choose `after` as
//! a sweep over the operation's measured duration (see [`sweep`]) rather than at random.

use crate::runner::PluginCall;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// How a run chosen to be killed ended.
#[derive(Debug, Clone)]
pub struct KillOutcome {
    /// SIGKILL reached the process while it ran.
    pub killed: bool,
    /// Its exit code when it exited by itself.
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From start to its end (its exit, or the kill).
    pub elapsed: Duration,
}

impl KillOutcome {
    /// It ran to the end and succeeded.
    pub fn completed(&self) -> bool {
        !self.killed && self.status == Some(0)
    }
}

/// Runs `cmd` (its stdio is piped here) in a new process group, writes `stdin`, and
/// kills the group with SIGKILL once `after` has passed since the start, unless the
/// process has exited by then.
pub fn run_killed_after(mut cmd: Command, stdin: &[u8], after: Duration) -> KillOutcome {
    let started = Instant::now();
    let limits = cni_os::child::Limits::new(started + after);
    let (done, killed) = match cni_os::child::run(&mut cmd, stdin, &limits) {
        Ok(done) => (done, false),
        // It may have exited by itself between the last look and the kill.
        Err(cni_os::child::Error::Timeout(done)) => {
            let killed = done.status.signal() == Some(libc::SIGKILL);
            (done, killed)
        }
        Err(e) => panic!("running the process to be killed: {e}"),
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    KillOutcome {
        killed,
        status: done.status.code(),
        stdout: text(&done.stdout),
        stderr: text(&done.stderr),
        elapsed: started.elapsed(),
    }
}

impl PluginCall {
    /// Runs the call and kills it (its whole process group) `after` its start.
    pub fn run_killed_after(&self, after: Duration) -> KillOutcome {
        let (cmd, ns_file) = self.command();
        let outcome = run_killed_after(cmd, self.stdin_bytes(), after);
        drop(ns_file);
        outcome
    }
}

/// Kill moments covering an operation that takes `duration`: the span from 0 to
/// `duration` cut into `points` equal strata, one moment drawn in each. Stratified rather
/// than uniform so that every part of the operation is hit at every point count, and
/// seeded so that a failing run can be repeated.
pub fn sweep(rng: &mut SeededRng, duration: Duration, points: usize) -> Vec<Duration> {
    let span = duration.as_nanos() as f64;
    (0..points)
        .map(|i| Duration::from_nanos((span * (i as f64 + rng.unit()) / points as f64) as u64))
        .collect()
}

/// The run's seed: randomised suites derive theirs from it when their own variable is unset.
pub const RUN_SEED_VAR: &str = "CNI_TEST_SEED";

/// SplitMix64: small, fast, and the same sequence for the same seed on every machine.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    pub fn new(seed: u64) -> SeededRng {
        SeededRng { state: seed }
    }

    /// The seed in environment variable `var` (decimal); else one derived from the run's
    /// seed [`RUN_SEED_VAR`] and `var` (`tools/test` sets it from the commit, so a run of
    /// one commit repeats exactly, and suites of one run draw different sequences); else a
    /// fresh one from the kernel. Printed either way with how to repeat the run.
    pub fn from_env(var: &str) -> (SeededRng, u64) {
        let parse = |name: &str, text: String| -> u64 {
            text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a u64"))
        };
        let seed = match (std::env::var(var), std::env::var(RUN_SEED_VAR)) {
            (Ok(text), _) => parse(var, text),
            (Err(_), Ok(text)) => {
                // FNV-1a of the suite's variable name, mixed into the run's seed.
                let name = var
                    .bytes()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
                SeededRng::new(parse(RUN_SEED_VAR, text) ^ name).next_u64()
            }
            _ => cni_os::random::u64().expect("getrandom"),
        };
        println!("seed {seed} (repeat with {var}={seed})");
        (SeededRng::new(seed), seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The number in environment variable `var`, else `default`: suites take their case
/// counts so, small for CI and larger by hand.
pub fn count_from_env(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{var}={text:?} is not a count")),
        Err(_) => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sequences_repeat_and_sweeps_cover_every_stratum() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        assert_eq!(
            (0..5).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..5).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
        let points = sweep(&mut a, Duration::from_millis(10), 5);
        for (i, p) in points.iter().enumerate() {
            assert!(
                *p >= Duration::from_millis(2 * i as u64) && *p < Duration::from_millis(2 * (i as u64 + 1)),
                "{points:?}"
            );
        }
    }

    #[test]
    fn a_long_process_is_killed_and_a_short_one_is_not() {
        let mut sleep = Command::new("sleep");
        sleep.arg("5");
        let out = run_killed_after(sleep, b"", Duration::from_millis(20));
        assert!(out.killed && out.status.is_none(), "{out:?}");
        let out = run_killed_after(Command::new("true"), b"", Duration::from_secs(5));
        assert!(out.completed(), "{out:?}");
        // The group goes: a child of the killed process dies with it.
        let mut shell = Command::new("sh");
        shell.args(["-c", "sleep 5 & echo $!; wait"]);
        let out = run_killed_after(shell, b"", Duration::from_millis(200));
        assert!(out.killed, "{out:?}");
        let pid: u32 = out.stdout.trim().parse().expect("the shell printed its child's pid");
        crate::children::wait_until_exited(pid, Duration::from_secs(5));
    }
}
