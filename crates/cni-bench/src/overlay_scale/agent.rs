//! One `cni-overlay-agent` process per simulated node, run the way the overlay's own tests
//! run it: in the simulation's namespace (where etcd listens on loopback), programming the
//! node's namespace through `--netns`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::topology::{Node, UNDERLAY_IF};
use crate::Result;

/// What every agent of a run shares.
pub struct AgentSettings<'a> {
    pub binary: &'a Path,
    pub endpoint: &'a str,
    /// The lease TTL: the agent renews three times per TTL.
    pub ttl: u64,
}

/// The etcd prefix and device of the simulation's overlay.
pub const ETCD_PREFIX: &str = "/sc-overlay";
pub const DEVICE: &str = "scvx0";

/// A running agent; dropping it kills it (SIGKILL) and reaps it.
pub struct Agent {
    child: Child,
}

impl Agent {
    /// Starts `node`'s agent, its log appended to the node's log file. With
    /// `--revoke-on-exit` a SIGTERM makes its peers drop it at once (a clean leave).
    pub fn spawn(settings: &AgentSettings, node: &Node) -> Result<Agent> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(node.log_file())?;
        let child = Command::new(settings.binary)
            .args(["--etcd-endpoints", settings.endpoint, "--iface", UNDERLAY_IF, "--node", &node.name])
            .args(["--prefix", ETCD_PREFIX, "--device", DEVICE, "--vni", "42"])
            .args(["--ttl", &settings.ttl.to_string(), "--revoke-on-exit", "--netns"])
            .arg(node.ns.path())
            .arg("--subnet-file")
            .arg(node.subnet_file())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(Agent { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory in KiB (`VmRSS` of `/proc/PID/status`); None once it exited.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.child.id())
    }

    /// CPU time used so far (user + system).
    pub fn cpu_time(&self) -> Option<Duration> {
        cpu_time(self.child.id())
    }

    /// Whether the process has exited (it should not while the simulation runs).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM (through kill(1): no signal code of our own), then waits up to `limit` for
    /// the agent to revoke its lease and exit; SIGKILL after that.
    pub fn stop(mut self, limit: Duration) -> Result<()> {
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        let exited = cni_testkit::poll::poll(limit, || self.child.try_wait().ok().flatten());
        if exited.is_none() {
            return Err(crate::Error::Timeout(format!("agent {} ignored SIGTERM", self.child.id())));
        }
        Ok(())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VmRSS` of process `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_kib(&status)
}

/// CPU time of process `pid` in nanoseconds (`/proc/PID/schedstat`'s first field: the
/// scheduler's own account, where `/proc/PID/stat` counts in 10 ms ticks, too coarse for
/// an agent that mostly sleeps). The main thread's: the agent has no other busy thread.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    parse_cpu_time(&stat)
}

fn parse_cpu_time(schedstat: &str) -> Option<Duration> {
    Some(Duration::from_nanos(schedstat.split_whitespace().next()?.parse().ok()?))
}

fn parse_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_the_status_file() {
        assert_eq!(parse_rss_kib("Name:\tx\nVmHWM:\t  9 kB\nVmRSS:\t    4212 kB\n"), Some(4212));
        assert_eq!(parse_rss_kib("Name:\tzombie\n"), None);
        assert!(rss_kib(std::process::id()).is_some_and(|kib| kib > 0));
    }

    #[test]
    fn cpu_time_is_the_schedulers_first_figure() {
        assert_eq!(parse_cpu_time("142259943 25044298 893\n"), Some(Duration::from_nanos(142_259_943)));
        assert_eq!(parse_cpu_time(""), None);
        assert!(cpu_time(std::process::id()).is_some());
    }
}
