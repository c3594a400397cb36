//! The OCI runtime (runc; crun takes the same commands) that holds one plugin container
//! per network, and running netplugin executables in it under a time limit.
//!
//! A plugin container is *created* but never *started*: the runtime's own init process
//! holds its mount namespace and root filesystem for as long as the container exists, so
//! an image needs no long-running program of its own. Each `setup`/`add`/`del` is a
//! `runtime exec` into it. The container shares the host's network, PID, UTS and IPC
//! namespaces (they are simply not unshared) and has its own mount namespace; `/proc` shows
//! the host's processes, so `/proc/PID/ns/net` paths work inside, and `/run/netns` is the
//! host's (a recursive, slave bind mount: namespaces named later appear too).

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::ExecFailure;

/// The most of each of an executable's stdout and stderr that is kept: far above any CNI
/// result or error message.
pub const EXEC_OUTPUT_CAP: usize = 1 << 20;

/// Every capability (in kernel bit order): netplugins configure the host's and the
/// containers' networks. Those outside our own bounding set are left out (the runtime
/// could not grant them).
const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
];

/// Where the host's named network namespaces are (shared into every plugin container).
pub const NETNS_DIR: &str = "/run/netns";

/// The OCI runtime configuration of a plugin container whose root filesystem is the
/// bundle's `rootfs`. `host_netns`, when given, is the network namespace the plugin treats
/// as the host's (default: the namespace the runtime runs in).
pub fn bundle_config(host_netns: Option<&Path>) -> Value {
    let mut namespaces = vec![json!({ "type": "mount" })];
    if let Some(path) = host_netns {
        namespaces.push(json!({ "type": "network", "path": path }));
    }
    let capabilities = grantable_capabilities();
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            // Never run: the container stays in the "created" state (see the module docs).
            "args": ["/opt/network/setup"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {
                "bounding": capabilities, "effective": capabilities, "permitted": capabilities,
                "inheritable": capabilities, "ambient": capabilities,
            },
            "noNewPrivileges": false,
        },
        "root": { "path": "rootfs", "readonly": false },
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"] },
            { "destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"] },
            { "destination": NETNS_DIR, "type": "bind", "source": NETNS_DIR, "options": ["rbind", "rslave"] },
        ],
        "linux": { "namespaces": namespaces },
    })
}

/// The capabilities of [`CAPABILITIES`] in this process's bounding set.
fn grantable_capabilities() -> Vec<&'static str> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let bounding = status
        .lines()
        .find_map(|line| line.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(u64::MAX);
    CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1 << bit) != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// One OCI runtime binary with its own state directory (`--root`).
#[derive(Debug, Clone)]
pub struct Runtime {
    pub program: PathBuf,
    pub root: PathBuf,
}

/// What a finished executable left: its outcome and its output.
#[derive(Debug)]
pub struct ExecOutput {
    pub outcome: Result<(), ExecFailure>,
    pub stdout: String,
    pub stderr: String,
}

/// Why the OCI runtime could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime program could not be started.
    #[error("cannot run {}: {source}", program.display())]
    Spawn { program: PathBuf, source: std::io::Error },
    /// It ran and exited with a failure; `output` is what it said.
    #[error("`{command}` failed ({status}): {output}")]
    Failed { command: String, status: std::process::ExitStatus, output: String },
    #[error("running {}: {reason}", program.display())]
    Wait { program: PathBuf, reason: cni_os::child::Error },
    #[error("{}: {source}", path.display())]
    File { path: PathBuf, source: std::io::Error },
    #[error("create the scratch directory: {0}")]
    Scratch(std::io::Error),
}

impl Runtime {
    fn cannot_run(&self) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
        move |source| RuntimeError::Spawn { program: self.program.clone(), source }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.arg("--root").arg(&self.root);
        command
    }

    fn run(&self, args: &[&str]) -> Result<String, RuntimeError> {
        let output = self.command().args(args).stdin(Stdio::null()).output().map_err(self.cannot_run())?;
        if !output.status.success() {
            return Err(RuntimeError::Failed {
                command: format!("{} {}", self.program.display(), args.join(" ")),
                status: output.status,
                output: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Creates container `id` from `bundle` (it is left in the "created" state).
    ///
    /// The container's init inherits the runtime's stdio and holds it for its whole life,
    /// so its output goes to a file next to the bundle, never to a pipe we would wait on.
    pub fn create(&self, id: &str, bundle: &Path) -> Result<(), RuntimeError> {
        let log = bundle.join("create.log");
        let log_file =
            File::create(&log).map_err(|source| RuntimeError::File { path: log.clone(), source })?;
        let status = self
            .command()
            .args(["create", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .status()
            .map_err(self.cannot_run())?;
        if !status.success() {
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(RuntimeError::Failed {
                command: format!("{} create", self.program.display()),
                status,
                output: output.trim().to_string(),
            });
        }
        Ok(())
    }

    /// The container's status ("created", "running", "stopped", …), `None` if it does not
    /// exist.
    pub fn status(&self, id: &str) -> Option<String> {
        let state: Value = serde_json::from_str(&self.run(&["state", id]).ok()?).ok()?;
        state.get("status").and_then(Value::as_str).map(str::to_string)
    }

    /// Removes the container, killing its processes; a missing container is not an error.
    ///
    /// Plugin containers have no cgroup of their own, so the runtime only knows its init:
    /// everything else in the container's mount namespace (background daemons that `setup`
    /// double-forked, a hung `add`) is killed here first.
    pub fn delete(&self, id: &str) -> Result<(), RuntimeError> {
        let Ok(state) = self.run(&["state", id]) else {
            return Ok(());
        };
        let init = serde_json::from_str::<Value>(&state).ok().and_then(|s| s.get("pid")?.as_i64());
        if let Some(init) = init.filter(|&pid| pid > 0) {
            kill_mount_namespace(init as i32);
        }
        self.run(&["delete", "--force", id]).map(drop)
    }

    /// Runs `args` in container `id` with `stdin` as its standard input, killing it (and
    /// everything it started that still hangs on) after `limit`. `scratch` is a private
    /// directory for the runtime's pid file.
    ///
    /// The output comes through pipes (kept up to [`EXEC_OUTPUT_CAP`] a stream): a
    /// background process that `setup` leaves behind holding them only delays the return
    /// by [`cni_os::child::PIPE_GRACE`], after which it gets EPIPE on writing.
    pub fn exec(
        &self,
        id: &str,
        args: &[&str],
        stdin: &[u8],
        limit: Duration,
        scratch: &Path,
    ) -> Result<ExecOutput, RuntimeError> {
        std::fs::create_dir_all(scratch).map_err(RuntimeError::Scratch)?;
        let pid_path = scratch.join("pid");
        // Not a process group of its own: at the limit runc alone is killed, and the
        // executable's tree is walked from the pid file, while its descendants are still
        // its children (a group kill first would orphan those that left the group).
        let child = self
            .command()
            .arg("exec")
            .arg("--pid-file")
            .arg(&pid_path)
            .arg(id)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(self.cannot_run())?;
        let limits = cni_os::child::Limits::new(Instant::now() + limit).output_cap(EXEC_OUTPUT_CAP);
        let (done, outcome) = match cni_os::child::finish(child, stdin, &limits) {
            Ok(done) => {
                let outcome = match (done.status.code(), done.status.signal()) {
                    (Some(0), _) => Ok(()),
                    (Some(code), _) => Err(ExecFailure::Exit(code)),
                    (None, Some(signal)) => Err(ExecFailure::Signal(signal)),
                    (None, None) => Err(ExecFailure::Exit(-1)),
                };
                (done, outcome)
            }
            Err(cni_os::child::Error::Timeout(partial)) => {
                if let Some(pid) = std::fs::read_to_string(&pid_path).ok().and_then(|s| s.trim().parse().ok())
                {
                    kill_tree(pid);
                }
                (partial, Err(ExecFailure::Timeout(limit)))
            }
            Err(reason) => return Err(RuntimeError::Wait { program: self.program.clone(), reason }),
        };
        let _ = std::fs::remove_dir_all(scratch);
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        Ok(ExecOutput { outcome, stdout: text(&done.stdout), stderr: text(&done.stderr) })
    }
}

/// SIGKILLs `pid` and all its descendants (the container shares the host's PID namespace,
/// so the whole tree is visible in our `/proc`).
fn kill_tree(pid: i32) {
    let mut victims = vec![pid];
    let mut i = 0;
    while i < victims.len() {
        victims.extend(children_of(victims[i]));
        i += 1;
    }
    for victim in victims {
        // A stale pid is harmless: every victim was a live descendant a moment ago.
        let _ = cni_os::process::kill(victim as u32, cni_os::process::Signal::KILL);
    }
}

/// SIGKILLs every process other than `init` that shares `init`'s mount namespace.
fn kill_mount_namespace(init: i32) {
    let Ok(namespace) = std::fs::read_link(format!("/proc/{init}/ns/mnt")) else { return };
    // Our own namespace is never a plugin container's, but make sure.
    if std::fs::read_link("/proc/self/ns/mnt").is_ok_and(|own| own == namespace) {
        return;
    }
    for pid in all_pids().into_iter().filter(|&pid| pid != init) {
        if std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns == namespace) {
            let _ = cni_os::process::kill(pid as u32, cni_os::process::Signal::KILL);
        }
    }
}

fn all_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok()).collect()
}

fn children_of(parent: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.to_string()))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                == Some(parent)
        })
        .collect()
}
