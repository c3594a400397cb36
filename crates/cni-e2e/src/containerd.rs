//! A private containerd daemon and `ctr run --cni` on a private host.
//!
//! `ctr` has no flags for CNI directories: it reads `/etc/cni/net.d` and runs plugins from
//! `/opt/cni/bin`. Inside the [`EngineHost`]'s mount namespace those are the test's config
//! directory and the plugin directory under test. The daemon's root, state, sockets and
//! config are temp dirs; its CRI plugin is disabled, so it touches no CNI state by itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use cni_testkit::ns::require_root;
use tempfile::TempDir;

use crate::engine_host::EngineHost;
use crate::image::{oci_archive, rootfs_tar};
use crate::plugin_dir::PluginDir;
use crate::process::{describe, die_with_parent, output_of};

/// The network ctr's containers join, and its subnet.
pub const NETWORK: &str = "cne-ctr";
pub const SUBNET: &str = "10.89.77.0/24";
/// What `ctr run --cni` needs: the conflist's chain plus the loopback network it adds.
pub const CTR_CHAIN: &[&str] = &["bridge", "host-local", "portmap", "loopback"];

/// A containerd daemon the test started, on its own host.
#[derive(Debug)]
pub struct Containerd {
    daemon: Child,
    host: EngineHost,
    plugins: PluginDir,
    dir: TempDir,
}

impl Containerd {
    /// Starts containerd with the plugin directory from the environment and imports the
    /// test image.
    pub fn start() -> Containerd {
        require_root();
        let plugins = PluginDir::from_env();
        plugins.require(CTR_CHAIN);
        let dir = tempfile::Builder::new().prefix("cne-containerd-").tempdir().expect("containerd temp dir");
        let conf_dir = dir.path().join("net.d");
        fs::create_dir(&conf_dir).expect("create the CNI config dir");
        fs::write(conf_dir.join("10-cne.conflist"), conflist()).expect("write the conflist");
        let config = dir.path().join("config.toml");
        fs::write(&config, daemon_config(dir.path())).expect("write containerd's config");
        let log = fs::File::create(dir.path().join("containerd.log")).expect("create containerd.log");

        let host = EngineHost::new(plugins.path(), &conf_dir);
        let mut command = host.command_without_timeout("containerd");
        let daemon = die_with_parent(&mut command)
            .arg("--config")
            .arg(&config)
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let containerd = Containerd { daemon, host, plugins, dir };
        containerd.wait_until_serving();
        let tar = rootfs_tar(containerd.dir.path());
        let archive = oci_archive(containerd.dir.path(), &tar);
        containerd.ok(&["image", "import", archive.to_str().expect("utf-8 temp path")]);
        containerd
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    fn wait_until_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.run(&["version"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start; its log:\n{}",
                fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The host the containers run on.
    pub fn host(&self) -> &EngineHost {
        &self.host
    }

    /// "ours" or the plugin directory, for log lines.
    pub fn plugins_label(&self) -> &str {
        self.plugins.label()
    }

    /// A `ctr` command talking to this daemon (with a time limit).
    pub fn ctr(&self) -> Command {
        let mut command = self.host.command("ctr");
        command.arg("--address").arg(self.socket());
        command
    }

    /// A `ctr` command for a long-running foreground container the caller stops itself.
    pub fn ctr_without_timeout(&self) -> Command {
        let mut command = self.host.command_without_timeout("ctr");
        command.arg("--address").arg(self.socket());
        command
    }

    /// Runs `ctr <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        output_of(self.ctr().args(args), "ctr")
    }

    /// Runs `ctr <args>`, panics with its output unless it succeeds, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "ctr {} failed ({}) on plugins {}:\n{}",
            args.join(" "),
            output.status,
            self.plugins.label(),
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The private host's host-local data directory.
    pub fn host_local_data_dir(&self) -> PathBuf {
        self.host.private_path("/var/lib/cni/networks")
    }

    /// containerd's own log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Stop whatever tasks a failed test left (their shims exit with them), then the
        // daemon we started, by its pid.
        let tasks = self.run(&["task", "ls", "--quiet"]);
        for task in String::from_utf8_lossy(&tasks.stdout).split_whitespace() {
            let _ = self.run(&["task", "kill", "--signal", "SIGKILL", task]);
            let _ = self.run(&["task", "delete", "--force", task]);
        }
        let containers = self.run(&["container", "ls", "--quiet"]);
        for container in String::from_utf8_lossy(&containers.stdout).split_whitespace() {
            let _ = self.run(&["container", "delete", container]);
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A typical containerd bridge network: bridge + host-local, then portmap.
fn conflist() -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cne-ctr0",
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": SUBNET }]],
                    "routes": [{ "dst": "0.0.0.0/0" }]
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    })
    .to_string()
}

/// containerd's config: everything under `dir`, the CRI plugin off.
fn daemon_config(dir: &Path) -> String {
    let path = |name: &str| dir.join(name).display().to_string();
    format!(
        "version = 2\nroot = {root:?}\nstate = {state:?}\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         [grpc]\n  address = {sock:?}\n[ttrpc]\n  address = {ttrpc:?}\n[debug]\n  address = {debug:?}\n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n  path = {opt:?}\n",
        root = path("root"),
        state = path("state"),
        sock = path("containerd.sock"),
        ttrpc = path("containerd.sock.ttrpc"),
        debug = path("debug.sock"),
        opt = path("opt"),
    )
}
