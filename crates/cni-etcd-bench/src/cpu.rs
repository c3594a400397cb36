//! Where a phase's CPU time went, from the kernel's own accounting (`/proc/PID/stat`): the
//! plugin processes (this process's waited-for children), the launcher (this process: the
//! forks, pipes and waits), the node agents and the etcd members. Divided by the ADDs
//! done, it is a figure that does not depend on what else the machine runs: at 1,000 ADDs
//! a second, two cores allow 2 ms per ADD in all.

use std::time::Duration;

/// Linux reports these times in USER_HZ ticks, fixed at 100 a second for user space.
const TICK: Duration = Duration::from_millis(10);

/// utime + stime, and cutime + cstime (children waited for), of process `pid`.
fn times(pid: &str) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect())
        .unwrap_or_default();
    // After ')': state is index 0, so utime (field 14) is index 11.
    let ticks = |i: usize| fields.get(i).copied().unwrap_or(0) as u32;
    (TICK * (ticks(11) + ticks(12)), TICK * (ticks(13) + ticks(14)))
}

/// CPU time used so far, by role.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    plugins: Duration,
    launcher: Duration,
    agents: Duration,
    etcd: Duration,
}

impl Sample {
    pub fn take(agents: &[u32], etcd: &[u32]) -> Sample {
        let (launcher, plugins) = times("self");
        let sum = |pids: &[u32]| pids.iter().map(|pid| times(&pid.to_string()).0).sum();
        Sample { plugins, launcher, agents: sum(agents), etcd: sum(etcd) }
    }

    /// The CPU time per ADD between `self` and the later `end`, as one report line.
    pub fn per_add(&self, end: &Sample, adds: usize) -> String {
        let ms = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64() * 1e3 / adds.max(1) as f64;
        let parts = [
            ("plugin processes", ms(self.plugins, end.plugins)),
            ("launcher", ms(self.launcher, end.launcher)),
            ("agents", ms(self.agents, end.agents)),
            ("etcd", ms(self.etcd, end.etcd)),
        ];
        let total: f64 = parts.iter().map(|(_, v)| v).sum();
        let parts: Vec<String> = parts.iter().map(|(name, v)| format!("{name} {v:.3}")).collect();
        format!("CPU per ADD (ms): {}; total {total:.3}", parts.join(", "))
    }
}
