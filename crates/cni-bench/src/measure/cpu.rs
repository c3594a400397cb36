//! Where a phase's CPU time went, from the kernel's own accounting ([`super::process`]): the
//! plugin processes (this process's waited-for children), the launcher (this process: the
//! forks, pipes and waits), the node agents and the etcd members. Divided by the ADDs
//! done, it is a figure that does not depend on what else the machine runs: at 1,000 ADDs
//! a second, two cores allow 2 ms per ADD in all.

use std::time::Duration;

use super::process::{cpu_time, waited_children_cpu_time};

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
        let cpu = |pid: &u32| cpu_time(*pid).unwrap_or_default();
        Sample {
            plugins: waited_children_cpu_time("self"),
            launcher: cpu(&std::process::id()),
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
