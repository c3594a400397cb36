//! One `etcd-ipam agent` per simulated node, as each node of a cluster runs its own: its
//! own process, socket and private directory, killed and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Agents {
    /// Holds a directory per node, `node-N/agent.sock` in it.
    dir: PathBuf,
    children: Vec<Child>,
}

impl Agents {
    /// Starts `nodes` agents of the binary `bin` and waits until each one listens.
    pub fn start(bin: &Path, nodes: usize) -> Result<Agents, String> {
        let dir = std::env::temp_dir().join(format!("tp-ed-bench-{}", std::process::id()));
        let mut agents = Agents { dir, children: Vec::new() };
        for node in 0..nodes {
            let socket = agents.socket(node);
            let child = Command::new(bin)
                .args(["agent", "--socket"])
                .arg(&socket)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {}: {e}", bin.display()))?;
            agents.children.push(child);
            let start = Instant::now();
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                if start.elapsed() > Duration::from_secs(10) {
                    return Err(format!("{} did not listen on {}", bin.display(), socket.display()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(agents)
    }

    /// The agents' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Node `node`'s agent socket (the agent makes its directory, private).
    pub fn socket(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}")).join("agent.sock")
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
