//! Running a plugin binary the way a runtime does, and reading back what it printed.

use cni_types::CniError;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What a plugin run printed and how it exited.
#[derive(Debug, Clone)]
pub struct PluginOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl PluginOutput {
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// stdout as JSON; panics with the whole output when the run failed or printed no JSON.
    pub fn json(&self) -> Value {
        assert!(
            self.success(),
            "plugin failed (status {}): {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// The error object; panics unless the run failed with exit 1 and a valid error JSON.
    pub fn error(&self) -> CniError {
        assert_eq!(self.status, 1, "expected a CNI error, got status {}: {}", self.status, self.stdout);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not an error object ({e}): {:?}", self.stdout))
    }
}

/// One plugin invocation, built up and then run.
#[derive(Debug, Clone)]
pub struct PluginCall {
    binary: PathBuf,
    env: Vec<(String, String)>,
    stdin: Vec<u8>,
    netns_fd_path: Option<PathBuf>,
    own_uts_namespace: bool,
    limit: Duration,
}

/// How long a call may run unless [`PluginCall::limit`] says otherwise: far above any
/// healthy plugin run, so only a hung plugin reaches it — and then fails its one call
/// instead of hanging the whole test binary.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(120);

impl PluginCall {
    /// A call of `binary` for `command` as a runtime on the test's host makes it: the process
    /// inside `host`, CNI_PATH `plugin_dir`, and CNI_NETNS and the container ID naming
    /// `container` when there is one.
    pub fn from_host(
        binary: impl Into<PathBuf>,
        command: &str,
        plugin_dir: &Path,
        host: &crate::ns::TestNetns,
        container: Option<&crate::ns::TestNetns>,
    ) -> PluginCall {
        let call = PluginCall::new(binary, command)
            .in_namespace(host.path())
            .cni_path(&plugin_dir.display().to_string());
        match container {
            Some(c) => call.netns(c.path()).container_id(c.name()),
            None => call,
        }
    }

    /// A call of `binary` with CNI_COMMAND=`command`, a clean environment, and the defaults
    /// a test usually wants (container `test-ctr`, ifname `eth0`).
    pub fn new(binary: impl Into<PathBuf>, command: &str) -> PluginCall {
        let binary = binary.into();
        let dir = binary.parent().map(Path::to_path_buf).unwrap_or_default();
        PluginCall {
            binary,
            env: vec![
                ("CNI_COMMAND".into(), command.into()),
                ("CNI_CONTAINERID".into(), "test-ctr".into()),
                ("CNI_IFNAME".into(), "eth0".into()),
                ("CNI_PATH".into(), dir.display().to_string()),
                ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
            ],
            stdin: Vec::new(),
            netns_fd_path: None,
            own_uts_namespace: false,
            limit: DEFAULT_LIMIT,
        }
    }

    /// Sets (or replaces) an environment variable.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> PluginCall {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    /// Removes an environment variable.
    pub fn unset(mut self, key: &str) -> PluginCall {
        self.env.retain(|(k, _)| k != key);
        self
    }

    pub fn container_id(self, id: &str) -> PluginCall {
        self.env("CNI_CONTAINERID", id)
    }

    pub fn ifname(self, ifname: &str) -> PluginCall {
        self.env("CNI_IFNAME", ifname)
    }

    pub fn netns(self, path: impl AsRef<Path>) -> PluginCall {
        let p = path.as_ref().display().to_string();
        self.env("CNI_NETNS", p)
    }

    pub fn cni_path(self, dirs: &str) -> PluginCall {
        self.env("CNI_PATH", dirs)
    }

    pub fn args(self, cni_args: &str) -> PluginCall {
        self.env("CNI_ARGS", cni_args)
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> PluginCall {
        self.stdin = bytes.into();
        self
    }

    pub fn config(self, conf: &Value) -> PluginCall {
        self.stdin(serde_json::to_vec(conf).expect("config serialises"))
    }

    /// Runs the plugin process inside the network namespace at `path` (the test's "host"),
    /// as if the runtime were running there.
    pub fn in_namespace(mut self, path: impl AsRef<Path>) -> PluginCall {
        self.netns_fd_path = Some(path.as_ref().to_path_buf());
        self
    }

    /// Runs the plugin in a UTS namespace of its own (a copy of the test's hostname and
    /// domain name): a test that checks whether a plugin writes `kernel.domainname` or
    /// `kernel.hostname` then cannot change the host's, whatever the plugin does. Read
    /// the plugin's namespace through `/proc/<pid>/ns/uts` from [`PluginCall::run_paused`].
    pub fn own_uts_namespace(mut self) -> PluginCall {
        self.own_uts_namespace = true;
        self
    }

    /// Lets the call run for `limit` (instead of [`DEFAULT_LIMIT`]) before its process
    /// group is killed and the test fails.
    pub fn limit(mut self, limit: Duration) -> PluginCall {
        self.limit = limit;
        self
    }

    /// The process this call runs, not started yet (stdin, stdout and stderr piped, in a
    /// process group of its own), and
    /// the namespace file its `pre_exec` enters, which must stay open until it is spawned.
    pub fn command(&self) -> (Command, Option<std::fs::File>) {
        let mut cmd = Command::new(&self.binary);
        cmd.env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        cni_os::child::prepare(&mut cmd);
        let ns_file = self.netns_fd_path.as_ref().map(|p| {
            std::fs::File::open(p).unwrap_or_else(|e| panic!("cannot open namespace {}: {e}", p.display()))
        });
        if let Some(file) = &ns_file {
            let fd = file.try_clone().unwrap_or_else(|e| panic!("duplicate the namespace descriptor: {e}"));
            cni_os::process::enter_netns_on_spawn(&mut cmd, fd.into());
        }
        if self.own_uts_namespace {
            cni_os::process::unshare_uts_on_spawn(&mut cmd);
        }
        (cmd, ns_file)
    }

    /// What the call writes to the plugin's stdin.
    pub fn stdin_bytes(&self) -> &[u8] {
        &self.stdin
    }

    pub fn run(&self) -> PluginOutput {
        self.run_paused(|_| {})
    }

    /// Runs the call, calling `before_input` with the plugin's pid once the process runs
    /// and before it is given its stdin. A plugin reads its stdin before it does anything,
    /// so `before_input` acts before the plugin does: it can plant files named after the
    /// plugin's pid (its temporary files), or open the plugin's namespaces.
    ///
    /// Panics (failing the test) when the plugin runs past its [limit](PluginCall::limit),
    /// after killing its process group.
    pub fn run_paused(&self, before_input: impl FnOnce(u32)) -> PluginOutput {
        let (mut cmd, ns_file) = self.command();
        let started = std::time::Instant::now();
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        before_input(child.id());
        let what = format_args!("plugin {} {}", self.binary.display(), self.verb());
        let done = finish_within(child, &self.stdin, started + self.limit, self.limit, what);
        let elapsed = started.elapsed();
        drop(ns_file);
        PluginOutput {
            status: done.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&done.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
            elapsed,
        }
    }

    /// The CNI_COMMAND this call passes (for messages).
    fn verb(&self) -> &str {
        self.env.iter().find(|(k, _)| k == "CNI_COMMAND").map_or("(no CNI_COMMAND)", |(_, v)| v)
    }
}

/// Runs `command` to its end with `stdin` as its input (stdio piped and a process group
/// of its own, see [`cni_os::child::prepare`]); past `limit` its group is killed and the
/// test fails naming `what`.
pub fn run_within(
    command: &mut Command,
    stdin: &[u8],
    limit: Duration,
    what: std::fmt::Arguments<'_>,
) -> cni_os::child::Finished {
    let started = std::time::Instant::now();
    let child = cni_os::child::prepare(command).spawn().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    finish_within(child, stdin, started + limit, limit, what)
}

/// [`cni_os::child::finish`] for a test: a timeout (the child's group killed at
/// `deadline`, `limit` after its start) or a failed wait fails the test, naming `what`
/// with what it printed so far.
pub fn finish_within(
    child: std::process::Child,
    stdin: &[u8],
    deadline: std::time::Instant,
    limit: Duration,
    what: std::fmt::Arguments<'_>,
) -> cni_os::child::Finished {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match cni_os::child::finish(child, stdin, &cni_os::child::Limits::new(deadline)) {
        Ok(done) => done,
        Err(cni_os::child::Error::Timeout(partial)) => panic!(
            "{what} did not finish within its limit of {limit:?}; its process group was killed\n\
             stdout so far: {}\nstderr so far: {}",
            text(&partial.stdout),
            text(&partial.stderr)
        ),
        Err(e) => panic!("running {what}: {e}"),
    }
}
