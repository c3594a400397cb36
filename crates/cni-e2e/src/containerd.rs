//! A private containerd daemon on a private host, for `ctr run --cni` or for its CRI plugin.
//!
//! `ctr` has no flags for CNI directories: it reads `/etc/cni/net.d` and runs plugins from
//! `/opt/cni/bin`. Inside the [`EngineHost`]'s mount namespace those are the test's config
//! directory and the plugin directory under test. The daemon's root, state, sockets and
//! config are temp dirs. Started with [`Containerd::start`] its CRI plugin is disabled, so
//! it touches no CNI state by itself; started with [`Containerd::start_cri`] the CRI plugin
//! runs (as kubelet's runtime would) with those same two directories, the test image as its
//! sandbox ("pause") image, and its streaming server on the private host's loopback.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use cni_testkit::ns::require_root;
use tempfile::TempDir;

use crate::engine_host::EngineHost;
use crate::image::{oci_archive, rootfs_tar};
use crate::plugin_dir::PluginDir;
use crate::process::{describe, output_of};
use cni_os::process::die_with_parent_on_spawn;

/// The network ctr's containers join, and its subnet.
pub const NETWORK: &str = "cne-ctr";
pub const SUBNET: &str = "10.89.77.0/24";
/// What `ctr run --cni` needs: the conflist's chain plus the loopback network it adds.
pub const CTR_CHAIN: &[&str] = &["bridge", "host-local", "portmap", "loopback"];

/// The CRI plugin's CNI conf template, in the daemon's directory.
pub const CRI_CONF_TEMPLATE: &str = "cni-conf-template.json";

/// The containerd namespace the CRI plugin keeps its images, sandboxes and containers in.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// A containerd daemon the test started, on its own host.
#[derive(Debug)]
pub struct Containerd {
    daemon: Child,
    host: EngineHost,
    plugins: PluginDir,
    /// Sets [`Containerd::swap_plugins`] replaced, under the current one's mount.
    swapped_out: Vec<PluginDir>,
    dir: TempDir,
    /// The containerd namespace `ctr` commands address.
    namespace: &'static str,
    cri: bool,
}

impl Containerd {
    /// Starts containerd with the plugin directory from the environment and imports the
    /// test image.
    pub fn start() -> Containerd {
        Containerd::launch(PluginDir::from_env(), Some(&conflist()), CTR_CHAIN, false)
    }

    /// Starts containerd with its CRI plugin on `plugins`, `conflist` as the only network
    /// in its CNI config directory (none: the network waits for `UpdateRuntimeConfig` and
    /// [`CRI_CONF_TEMPLATE`]) and `chain` (the plugins the conflist names, and loopback)
    /// required in `plugins`; imports the test image for it.
    pub fn start_cri(plugins: PluginDir, conflist: Option<&str>, chain: &[&str]) -> Containerd {
        Containerd::launch(plugins, conflist, chain, true)
    }

    fn launch(plugins: PluginDir, conflist: Option<&str>, chain: &[&str], cri: bool) -> Containerd {
        require_root();
        plugins.require(chain);
        let dir = tempfile::Builder::new().prefix("cne-containerd-").tempdir().expect("containerd temp dir");
        let conf_dir = dir.path().join("net.d");
        fs::create_dir(&conf_dir).expect("create the CNI config dir");
        if let Some(conflist) = conflist {
            fs::write(conf_dir.join("10-cne.conflist"), conflist).expect("write the conflist");
        }
        let host = EngineHost::new(plugins.path(), &conf_dir);
        let namespace = if cri { CRI_NAMESPACE } else { "default" };
        let daemon = spawn_daemon(&host, dir.path(), cri);
        let containerd = Containerd { daemon, host, plugins, swapped_out: Vec::new(), dir, namespace, cri };
        containerd.wait_until_serving();
        let tar = rootfs_tar(containerd.dir.path());
        let archive = oci_archive(containerd.dir.path(), &tar);
        containerd.ok(&["image", "import", archive.to_str().expect("utf-8 temp path")]);
        containerd
    }

    /// Kills the daemon (SIGKILL, as a crash would) and starts it again on the same state.
    pub fn kill_and_restart(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        self.daemon = spawn_daemon(&self.host, self.dir.path(), self.cri);
        self.wait_until_serving();
    }

    /// Swaps the plugins under the running daemon and its pods for `plugins`, which must
    /// hold `chain` ([`EngineHost::replace_plugin_dir`]: no restart, as a package upgrade
    /// of the plugins on a live node). The set swapped out is
    /// kept until the end: its directory lies under the new one's mount.
    pub fn swap_plugins(&mut self, plugins: PluginDir, chain: &[&str]) {
        plugins.require(chain);
        self.host.replace_plugin_dir(plugins.path());
        let old = std::mem::replace(&mut self.plugins, plugins);
        self.swapped_out.push(old);
    }

    /// The daemon's gRPC socket (CRI clients connect to it directly).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// Writes the CRI plugin's CNI conf template (a Go template: `{{.PodCIDR}}`), which
    /// `UpdateRuntimeConfig` with a pod CIDR turns into the conflist.
    pub fn write_conf_template(&self, template: &str) {
        fs::write(self.dir.path().join(CRI_CONF_TEMPLATE), template).expect("write the conf template");
    }

    /// Where the CRI plugin keeps a sandbox's files (`resolv.conf`, `hostname`).
    pub fn cri_sandbox_dir(&self, sandbox_id: &str) -> PathBuf {
        self.dir.path().join("root/io.containerd.grpc.v1.cri/sandboxes").join(sandbox_id)
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
        command.arg("--address").arg(self.socket()).arg("--namespace").arg(self.namespace);
        command
    }

    /// A `ctr` command for a long-running foreground container the caller stops itself.
    pub fn ctr_without_timeout(&self) -> Command {
        let mut command = self.host.command_without_timeout("ctr");
        command.arg("--address").arg(self.socket()).arg("--namespace").arg(self.namespace);
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

/// Starts containerd on `host` with its config, state and log under `dir`.
fn spawn_daemon(host: &EngineHost, dir: &Path, cri: bool) -> Child {
    let config = dir.join("config.toml");
    fs::write(&config, daemon_config(dir, cri)).expect("write containerd's config");
    // Appended to: a restarted daemon's log follows the first one's.
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .expect("open containerd.log");
    let mut command = host.command_without_timeout("containerd");
    die_with_parent_on_spawn(&mut command)
        .arg("--config")
        .arg(&config)
        .stdout(log.try_clone().expect("dup log fd"))
        .stderr(log)
        .spawn()
        .expect("start containerd")
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

/// containerd's config: everything under `dir`; the CRI plugin off, or on with the CNI
/// directories of the private host (where the test's conf dir and the plugins under test
/// are mounted), the test image as the sandbox image, and a conf template for
/// `UpdateRuntimeConfig` tests.
fn daemon_config(dir: &Path, cri: bool) -> String {
    let path = |name: &str| dir.join(name).display().to_string();
    let cri_section = if cri {
        format!(
            "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = {image:?}\n  \
             stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n  \
             disable_apparmor = true\n  enable_selinux = false\n  restrict_oom_score_adj = true\n\
             [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/opt/cni/bin\"\n  \
             conf_dir = \"/etc/cni/net.d\"\n  max_conf_num = 1\n  conf_template = {template:?}\n",
            image = crate::image::IMAGE_NAME,
            template = path(CRI_CONF_TEMPLATE),
        )
    } else {
        String::from("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")
    };
    format!(
        "version = 2\nroot = {root:?}\nstate = {state:?}\n{cri_section}\
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
