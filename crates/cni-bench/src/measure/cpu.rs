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

/// The CPU time process `pid` has used so far.
pub fn process_time(pid: u32) -> Duration {
    times(&pid.to_string()).0
}

/// CPU time used so far, by role.
#[derive(Clone, Default)]
pub struct Sample {
    plugins: Duration,
    launcher: Duration,
    agents: Duration,
    /// Per member process: one killed since an earlier sample is missing here and counts
    /// nothing in the difference (its time died with it).
    etcd: Vec<(u32, Duration)>,
}

impl Sample {
    pub fn take(agents: &[u32], etcd: &[u32]) -> Sample {
        let (launcher, plugins) = times("self");
        let cpu = |pid: &u32| times(&pid.to_string()).0;
        Sample {
            plugins,
            launcher,
            agents: agents.iter().map(cpu).sum(),
            etcd: etcd.iter().map(|pid| (*pid, cpu(pid))).collect(),
        }
    }

    /// Corrects a sample taken after etcd member `pid` was killed and reaped by this
    /// process: the kernel then adds its whole lifetime, `spent` (read just before the
    /// kill), to this process's children's time, which is the plugin processes' here.
    pub fn with_reaped_member(mut self, pid: u32, spent: Duration) -> Sample {
        self.plugins = self.plugins.saturating_sub(spent);
        self.etcd.push((pid, spent));
        self
    }

    fn etcd_of(&self, pid: u32) -> Duration {
        self.etcd.iter().find(|(p, _)| *p == pid).map(|(_, t)| *t).unwrap_or_default()
    }

    /// The CPU time per ADD between `self` and the later `end`, as one report line (a
    /// member killed in between counts nothing: its time died with it).
    pub fn per_add(&self, end: &Sample, adds: usize) -> String {
        let ms = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64() * 1e3 / adds.max(1) as f64;
        let parts = [
            ("plugin processes", ms(self.plugins, end.plugins)),
            ("launcher", ms(self.launcher, end.launcher)),
            ("agents", ms(self.agents, end.agents)),
            ("etcd", end.etcd.iter().map(|(pid, b)| ms(self.etcd_of(*pid), *b)).sum()),
        ];
        let total: f64 = parts.iter().map(|(_, v)| v).sum();
        let parts: Vec<String> = parts.iter().map(|(name, v)| format!("{name} {v:.3}")).collect();
        format!("CPU per ADD (ms): {}; total {total:.3}", parts.join(", "))
    }
}
