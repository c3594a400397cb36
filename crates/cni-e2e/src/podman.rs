//! podman 4.3 with its CNI backend, private in every respect.
//!
//! A private `containers.conf` (given in `CONTAINERS_CONF`) selects the CNI backend, points
//! `cni_plugin_dirs` only at the plugin directory under test (as the [`EngineHost`] mounts it,
//! on `/opt/cni/bin`) and `network_config_dir` at a
//! temp dir; storage (`--root`, `--runroot`) and libpod's tmp dir are temp dirs too, and
//! every command runs in an [`EngineHost`], so the machine's podman is never involved.

use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cni_os::process::{self, Limit, Signal};
use cni_testkit::ns::require_root;
use tempfile::TempDir;

use crate::engine_host::EngineHost;
use crate::image::{rootfs_tar, IMAGE_NAME};
use crate::net_text::{single_ipv4, Ipv4Cidr};
use crate::oracle::host_local_allocations;
use crate::plugin_dir::PluginDir;
use crate::process::{describe, output_of};

/// The chain podman 4.3 generates for a bridge network.
pub const PODMAN_CHAIN: &[&str] = &["bridge", "host-local", "portmap", "firewall", "tuning"];
/// podman's default network.
pub const DEFAULT_NETWORK: &str = "podman";
/// Where host-local keeps its allocations (its default `dataDir`; podman sets none).
pub const HOST_LOCAL_DATA_DIR: &str = "/var/lib/cni/networks";

/// A private podman installation on a private host.
#[derive(Debug)]
pub struct Podman {
    // Field order is drop order: containers are removed (in `Drop`) while the host and the
    // plugins still exist, then the host goes, then the directories.
    host: EngineHost,
    plugins: PluginDir,
    /// Sets [`Podman::swap_plugins`] replaced, under the current one's mount.
    swapped_out: Vec<PluginDir>,
    dir: TempDir,
    conf: PathBuf,
}

/// The network stack podman is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkBackend {
    /// CNI, with the plugins of the [`PluginDir`] under test.
    Cni,
    /// netavark + aardvark-dns (Debian's packages), podman's default stack since 4.0; the
    /// plugin directory is then unused.
    Netavark,
}

impl NetworkBackend {
    /// The name podman gives it in `containers.conf` and `podman info`.
    pub fn name(self) -> &'static str {
        match self {
            NetworkBackend::Cni => "cni",
            NetworkBackend::Netavark => "netavark",
        }
    }
}

impl Podman {
    /// Sets up podman on the plugin directory from the environment and imports the image.
    pub fn set_up() -> Podman {
        let plugins = PluginDir::from_env();
        plugins.require(PODMAN_CHAIN);
        Podman::set_up_on(plugins, NetworkBackend::Cni)
    }

    /// Sets up podman with `backend` on `plugins` and imports the image.
    pub fn set_up_on(plugins: PluginDir, backend: NetworkBackend) -> Podman {
        require_root();
        let dir = tempfile::Builder::new().prefix("cne-podman-").tempdir().expect("podman temp dir");
        for sub in ["root", "runroot", "tmp", "networks", "cni-conf"] {
            fs::create_dir(dir.path().join(sub)).expect("create a podman state dir");
        }
        let conf = dir.path().join("containers.conf");
        fs::write(&conf, containers_conf(dir.path(), backend)).expect("write containers.conf");
        let host = EngineHost::new(plugins.path(), &dir.path().join("cni-conf"));
        let podman = Podman { host, plugins, swapped_out: Vec::new(), dir, conf };
        let chosen = podman.ok(&["info", "--format", "{{.Host.NetworkBackend}}"]);
        assert_eq!(chosen, backend.name(), "podman ignored the private containers.conf's network_backend");
        let tar = rootfs_tar(podman.dir.path());
        podman.ok(&["import", tar.to_str().expect("utf-8 temp path"), IMAGE_NAME]);
        podman
    }

    /// Swaps the plugins under podman and its running containers for `plugins`, which must
    /// hold `chain` ([`EngineHost::replace_plugin_dir`]: every podman command and
    /// conmon's clean-up runs the new ones). The set swapped out is
    /// kept until the end: its directory lies under the new one's mount.
    pub fn swap_plugins(&mut self, plugins: PluginDir, chain: &[&str]) {
        plugins.require(chain);
        self.host.replace_plugin_dir(plugins.path());
        let old = std::mem::replace(&mut self.plugins, plugins);
        self.swapped_out.push(old);
    }

    /// The host the containers run on.
    pub fn host(&self) -> &EngineHost {
        &self.host
    }

    /// "ours" or the plugin directory, for log lines.
    pub fn plugins_label(&self) -> &str {
        self.plugins.label()
    }

    /// A `podman` command with the private configuration and storage.
    pub fn command(&self) -> Command {
        let mut command = self.host.command("podman");
        command
            .env("CONTAINERS_CONF", &self.conf)
            .arg("--root")
            .arg(self.dir.path().join("root"))
            .arg("--runroot")
            .arg(self.dir.path().join("runroot"));
        command
    }

    /// Runs podman with `args` and returns what happened.
    pub fn run(&self, args: &[&str]) -> Output {
        output_of(self.command().args(args), "podman")
    }

    /// Runs podman with `args`, panics with its output unless it succeeds, and returns its
    /// trimmed stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "podman {} failed ({}) on plugins {}:\n{}",
            args.join(" "),
            output.status,
            self.plugins.label(),
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// `podman run --rm IMAGE <command>`, timed; returns stdout and the time it took.
    pub fn timed_run_rm(&self, extra: &[&str], command: &[&str]) -> (String, Duration) {
        let mut args = vec!["run", "--rm"];
        args.extend_from_slice(extra);
        args.push(IMAGE_NAME);
        args.extend_from_slice(command);
        let started = Instant::now();
        let out = self.ok(&args);
        (out, started.elapsed())
    }

    /// Starts a background container named `name` running `command`; extra podman flags
    /// (network, ports, IP) go before the image.
    pub fn start(&self, name: &str, extra: &[&str], command: &[&str]) {
        let mut args = vec!["run", "-d", "--name", name];
        args.extend_from_slice(extra);
        args.push(IMAGE_NAME);
        args.extend_from_slice(command);
        self.ok(&args);
    }

    /// The IPv4 address of `eth0` as the container itself sees it.
    pub fn eth0_ipv4(&self, container: &str) -> Ipv4Cidr {
        single_ipv4(&self.ok(&["exec", container, "ip", "-o", "-4", "addr", "show", "eth0"]))
    }

    /// The MAC address of `eth0` as the container itself sees it.
    pub fn eth0_mac(&self, container: &str) -> String {
        self.ok(&["exec", container, "cat", "/sys/class/net/eth0/address"])
    }

    /// The first subnet and gateway of network `name`.
    pub fn network_subnet(&self, name: &str) -> (Ipv4Cidr, Ipv4Addr) {
        let text = self.ok(&[
            "network",
            "inspect",
            name,
            "--format",
            "{{range .Subnets}}{{.Subnet}} {{.Gateway}}{{end}}",
        ]);
        let (subnet, gateway) = text.split_once(' ').unwrap_or_else(|| panic!("no subnet in {text:?}"));
        (
            Ipv4Cidr::parse(subnet).unwrap_or_else(|| panic!("bad subnet {subnet:?}")),
            gateway.trim().parse().unwrap_or_else(|_| panic!("bad gateway {gateway:?}")),
        )
    }

    /// The addresses host-local holds for `network` on the private host.
    pub fn allocations(&self, network: &str) -> std::collections::BTreeSet<String> {
        host_local_allocations(&self.host.private_path(HOST_LOCAL_DATA_DIR), network)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Remove containers through podman so plugins get their DEL; whatever survives is
        // torn down with the host's namespaces anyway.
        let removed = self.run(&["rm", "--all", "--force", "--time", "0"]);
        if !removed.status.success() {
            eprintln!("cni-e2e: podman rm --all failed:\n{}", describe(&removed));
        }
        kill_leftover_conmons(&self.dir.path().join("runroot"));
        // dnsname (which podman adds to every network it creates when the plugin directory
        // has it) starts our resolver; it outlives its networks by design, not this test.
        kill_pid_file(&self.host().private_path("/run/cni/dnsname/dnsd.pid"));
    }
}

/// SIGKILLs the process whose pid `pid_file` holds, if any, and waits (bounded) until it
/// is gone or a zombie.
pub fn kill_pid_file(pid_file: &Path) {
    let Some(pid) = fs::read_to_string(pid_file).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
        return;
    };
    // A pid a daemon this test's private host started wrote into its own pid file.
    let _ = process::kill(pid, Signal::KILL);
    for _ in 0..250 {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status.is_empty() || status.contains("State:\tZ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Kills conmon processes podman started for containers that `podman rm` could not remove
/// (their pids are in `<runroot>/overlay-containers/<id>/userdata/conmon.pid`).
fn kill_leftover_conmons(runroot: &Path) {
    let Ok(containers) = fs::read_dir(runroot.join("overlay-containers")) else { return };
    for container in containers.flatten() {
        let pid_file = container.path().join("userdata/conmon.pid");
        let Some(pid) = fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
            continue;
        };
        // A pid podman recorded for a conmon it started for this test's private storage.
        let _ = process::kill(pid, Signal::KILL);
    }
}

/// The private `containers.conf`.
fn containers_conf(dir: &Path, backend: NetworkBackend) -> String {
    let mut conf = String::new();
    let nofile = process::hard_limit(Limit::OpenFiles);
    // podman starts conmon (and so crun) with RLIMIT_NPROC lowered to kernel.pid_max, and
    // without CAP_SYS_RESOURCE crun cannot raise it back: ask for no more than that.
    let nproc = process::hard_limit(Limit::Processes).min(pid_max());
    writeln!(conf, "[containers]").unwrap();
    // This VM's root lacks CAP_SYS_RESOURCE: podman's default ulimits (1048576) would make
    // crun's setrlimit fail, so ask for what we already have.
    writeln!(conf, "default_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]").unwrap();
    writeln!(conf, "cgroups = \"disabled\"").unwrap();
    writeln!(conf, "log_driver = \"k8s-file\"").unwrap();
    writeln!(conf, "[network]").unwrap();
    writeln!(conf, "network_backend = {:?}", backend.name()).unwrap();
    // Where the engine host mounts the plugin directory under test: the host's own path may
    // be a default plugin directory the engine host hides (`/usr/lib/cni`).
    writeln!(conf, "cni_plugin_dirs = [\"/opt/cni/bin\"]").unwrap();
    writeln!(conf, "network_config_dir = {:?}", dir.join("networks").display().to_string()).unwrap();
    writeln!(conf, "[engine]").unwrap();
    writeln!(conf, "runtime = \"crun\"").unwrap();
    writeln!(conf, "cgroup_manager = \"cgroupfs\"").unwrap();
    writeln!(conf, "events_logger = \"none\"").unwrap();
    writeln!(conf, "tmp_dir = {:?}", dir.join("tmp").display().to_string()).unwrap();
    conf
}

fn pid_max() -> u64 {
    fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u64::MAX)
}
