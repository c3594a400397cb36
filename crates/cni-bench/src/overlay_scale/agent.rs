//! One `cni-overlay-agent` process per simulated node, run the way the overlay's own tests
//! run it: in the simulation's namespace (where etcd listens on loopback), programming the
//! node's namespace through `--netns`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::topology::{Node, UNDERLAY_IF};
use super::Result;
use crate::measure::process;

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
        process::rss_kib(self.child.id())
    }

    /// CPU time used so far (user + system).
    pub fn cpu_time(&self) -> Option<Duration> {
        process::cpu_time(self.child.id())
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
            return Err(super::Error::Timeout(format!("agent {} ignored SIGTERM", self.child.id())));
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
