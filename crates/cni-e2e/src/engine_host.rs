//! The "host" that container engines run on during a test.
//!
//! Engines create their bridges, veths and firewall rules in the network namespace they run
//! in, and keep state in well-known paths (`/var/lib/cni`, `/run/netns`, `/run/containerd`,
//! `/opt/cni/bin`, `/etc/cni/net.d`). So every engine command runs inside
//! - a throwaway network namespace (a [`TestNetns`] named `cne-…`), and
//! - a private mount namespace, held open by a "keeper" process, in which `/run`,
//!   `/var/lib`, `/opt` and `/dev/shm` are empty tmpfs mounts, the plugin directory is
//!   bind-mounted on `/opt/cni/bin` and a test-owned config directory on `/etc/cni/net.d`.
//!   The other directories engines search for plugins by default (`/usr/lib/cni`, where
//!   Debian puts the Go plugins, among them) are hidden under empty read-only tmpfs
//!   mounts: an engine that ignored its configured plugin directory would otherwise run
//!   the Go plugins and pass for ours.
//!
//! Nothing an engine does there reaches the machine: dropping the host kills the keeper
//! and removes the network namespace, which takes every link and rule with it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use cni_testkit::ns::{require_root, TestNetns};

use crate::process::COMMAND_TIMEOUT_SECS;
use crate::NAME_PREFIX;
use cni_os::process::die_with_parent_on_spawn;

/// Sets up the private mounts, reports `ready`, then sleeps to hold the namespace open.
///
/// crun 1.8 refuses this VM's hybrid cgroup layout, so the cgroup2 mount at
/// `/sys/fs/cgroup/unified` is removed from the private view (containers run with
/// `cgroups = "disabled"` anyway).
const KEEPER_SCRIPT: &str = r#"set -eu
umount /sys/fs/cgroup/unified 2>/dev/null || true
mount -t tmpfs cne-run /run
mount -t tmpfs cne-var-lib /var/lib
mkdir -p /var/lib/cni
mount -t tmpfs cne-shm /dev/shm
mount -t tmpfs cne-opt /opt
mkdir -p /opt/cni/bin
mount --bind "$CNE_PLUGIN_DIR" /opt/cni/bin
for dir in /usr/local/libexec/cni /usr/libexec/cni /usr/local/lib/cni /usr/lib/cni; do
    if [ -d "$dir" ]; then mount -t tmpfs -o ro cne-no-plugins "$dir"; fi
done
mount --bind "$CNE_CNI_CONF_DIR" /etc/cni/net.d
echo ready
exec sleep infinity
"#;

/// A network namespace plus private mounts in which engine commands run.
#[derive(Debug)]
pub struct EngineHost {
    netns: TestNetns,
    keeper: Child,
}

impl EngineHost {
    /// Creates the namespaces; `plugin_dir` appears as `/opt/cni/bin` and `cni_conf_dir`
    /// as `/etc/cni/net.d` inside them (where containerd's `ctr` looks).
    pub fn new(plugin_dir: &Path, cni_conf_dir: &Path) -> EngineHost {
        require_root();
        assert!(
            Path::new("/etc/cni/net.d").is_dir(),
            "/etc/cni/net.d is missing (it comes with Debian's podman package): the test needs it as a mount point"
        );
        let netns = TestNetns::with_prefix(NAME_PREFIX).expect("create the engines' host network namespace");
        let mut unshare = netns.command("unshare");
        let mut keeper = die_with_parent_on_spawn(&mut unshare)
            .args(["--mount", "--propagation", "private", "--", "sh", "-c", KEEPER_SCRIPT])
            .env("CNE_PLUGIN_DIR", plugin_dir)
            .env("CNE_CNI_CONF_DIR", cni_conf_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the mount-namespace keeper (unshare)");
        let mut line = String::new();
        let stdout = keeper.stdout.take().expect("keeper stdout is piped");
        let read = BufReader::new(stdout).read_line(&mut line);
        if !matches!(read, Ok(n) if n > 0 && line.trim() == "ready") {
            let _ = keeper.kill();
            let status = keeper.wait();
            panic!("the mount-namespace keeper failed to set up its mounts ({status:?}, said {line:?})");
        }
        EngineHost { netns, keeper }
    }

    /// The network namespace engines run in.
    pub fn netns(&self) -> &TestNetns {
        &self.netns
    }

    /// A command running `program` in the host's network and mount namespaces, killed
    /// when it runs longer than [`COMMAND_TIMEOUT_SECS`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = self.command_without_timeout("timeout");
        command.args(["--kill-after=5", &COMMAND_TIMEOUT_SECS.to_string()]).arg(program);
        command
    }

    /// Like [`EngineHost::command`] for long-running processes (daemons, background
    /// containers) that the caller stops itself.
    pub fn command_without_timeout(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={}", self.keeper.id()))
            .args(["--mount", "--net", "--"])
            .arg(program)
            .stdin(Stdio::null());
        command
    }

    /// Puts `plugin_dir` on `/opt/cni/bin` in place of what was there, with the engines
    /// and their containers running: what an operator's package upgrade of the plugins
    /// does on a live node. Engines look plugins up by path on every operation, so the
    /// next ADD or DEL runs the new ones without a restart.
    ///
    /// A bind mount over the old one rather than files copied into it: the directory
    /// mounted there may be the machine's own (`CNI_E2E_PLUGIN_DIR=/usr/lib/cni`), which a
    /// test never writes to. `plugin_dir` must be visible in the private mount namespace
    /// (not under a default plugin directory the host hides), and the directory it covers
    /// must stay while the host lives: removing a directory detaches every mount on it.
    pub fn replace_plugin_dir(&self, plugin_dir: &Path) {
        let out = self
            .command("mount")
            .arg("--bind")
            .arg(plugin_dir)
            .arg("/opt/cni/bin")
            .output()
            .expect("run mount in the engines' mount namespace");
        assert!(
            out.status.success(),
            "bind {} on /opt/cni/bin: {}",
            plugin_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Where `path` of the private mount namespace is visible from the test process.
    pub fn private_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.keeper.id())).join(path.trim_start_matches('/'))
    }
}

impl Drop for EngineHost {
    fn drop(&mut self) {
        // Kill only the keeper we started (by its pid); the namespace goes with `netns`.
        let _ = self.keeper.kill();
        let _ = self.keeper.wait();
    }
}
