//! Finding and running plugin binaries.
//!
//! A plugin runs through [`cni_os::child`]: in its own process group so that, on timeout,
//! it and everything it started are killed together, its pipes served by one poll loop on
//! the calling thread, so a plugin that never reads its input, or a child that keeps the
//! output pipes open after the plugin exited, can never hang the caller — and no thread
//! is started per plugin.

use crate::error::{Error, Result};
use cni_types::trace::TRACE_VARS;
use cni_types::validate::validate_plugin_type;
use cni_types::CniError;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The variables libcni sets itself; inherited values of these never reach a plugin.
pub(crate) const CNI_VARS: [&str; 6] =
    ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"];

/// The most of each of a plugin's stdout and stderr that is kept: far above any real
/// result, so a runaway plugin cannot make its runtime hold gigabytes.
const OUTPUT_CAP: usize = 16 << 20;

/// Finds plugin `plugin_type`: the first regular file of that name in `dirs`, in order.
/// Names that could escape the directories (paths, `..`, empty) are refused.
pub fn find_plugin(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf> {
    validate_plugin_type(plugin_type).map_err(Error::InvalidPluginType)?;
    dirs.iter()
        .map(|dir| dir.join(plugin_type))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| m.is_file()))
        .ok_or_else(|| Error::PluginNotFound { plugin_type: plugin_type.to_string(), dirs: dirs.to_vec() })
}

/// One plugin invocation.
pub(crate) struct PluginRun<'a> {
    pub plugin_type: &'a str,
    pub binary: &'a Path,
    pub command: &'a str,
    /// CNI_* variables for this verb; the rest of the environment is inherited.
    pub env: Vec<(&'static str, String)>,
    pub stdin: &'a [u8],
    /// When the whole operation must be over.
    pub deadline: Instant,
    /// The operation's time limit, for the error message.
    pub timeout: Duration,
}

impl PluginRun<'_> {
    /// Runs the plugin; its stdout on success, its error otherwise.
    pub fn run(&self) -> Result<Vec<u8>> {
        let mut command = self.command();
        let child = self.spawn_retrying_busy(&mut command)?;
        let limits = cni_os::child::Limits::new(self.deadline).output_cap(OUTPUT_CAP);
        match cni_os::child::finish(child, self.stdin, &limits) {
            Ok(done) if done.status.success() && done.stdout_truncated => Err(Error::Decode {
                plugin_type: self.plugin_type.to_string(),
                command: self.command.to_string(),
                reason: format!("the result is larger than the {} MiB a plugin may print", OUTPUT_CAP >> 20),
                output: String::from_utf8_lossy(&done.stdout[..512]).into_owned(),
            }),
            Ok(done) if done.status.success() => Ok(done.stdout),
            Ok(done) => Err(self.failure(done.status, &done.stdout, &done.stderr)),
            Err(cni_os::child::Error::Timeout(_)) => Err(Error::Timeout {
                plugin_type: self.plugin_type.to_string(),
                command: self.command.to_string(),
                timeout: self.timeout,
            }),
            Err(cni_os::child::Error::Wait(e) | cni_os::child::Error::Spawn(e)) => {
                Err(Error::io(format!("waiting for plugin {:?}", self.plugin_type), e))
            }
        }
    }

    /// The process to start: this process's environment without the variables libcni
    /// sets itself, then this run's; in its own process group, with piped stdio.
    fn command(&self) -> Command {
        let mut command = Command::new(self.binary);
        for var in CNI_VARS {
            command.env_remove(var);
        }
        // A context the runtime hands over replaces the one this process inherited as a
        // whole: an inherited TRACESTATE or BAGGAGE belongs to another trace.
        if self.env.iter().any(|(key, _)| *key == "TRACEPARENT") {
            for var in TRACE_VARS {
                command.env_remove(var);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (*k, v)));
        cni_os::child::prepare(&mut command);
        command
    }

    fn spawn_retrying_busy(&self, command: &mut Command) -> Result<Child> {
        let mut pause = Duration::from_millis(5);
        loop {
            match command.spawn() {
                Ok(child) => return Ok(child),
                // ETXTBSY: the binary is being written (an install in progress, or another
                // thread forked while holding it open for writing). It clears quickly.
                Err(e)
                    if e.kind() == ErrorKind::ExecutableFileBusy
                        && Instant::now() + pause < self.deadline =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(source) => {
                    return Err(Error::Spawn {
                        plugin_type: self.plugin_type.to_string(),
                        path: self.binary.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }

    /// The error for a failed run: the plugin's error object when stdout holds one,
    /// otherwise what it printed (stderr if stdout is empty).
    fn failure(&self, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Error {
        if let Ok(error) = serde_json::from_slice::<CniError>(stdout) {
            return Error::Plugin {
                plugin_type: self.plugin_type.to_string(),
                command: self.command.to_string(),
                error: Box::new(error),
            };
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        let output = match (stdout.is_empty(), stderr.is_empty()) {
            (true, true) => "no output".to_string(),
            (true, false) => text(stderr),
            (false, true) => format!("stdout is not a CNI error object: {:?}", text(stdout)),
            (false, false) => {
                format!("stdout is not a CNI error object: {:?}; stderr: {}", text(stdout), text(stderr))
            }
        };
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => status.to_string(),
        };
        Error::PluginFailed {
            plugin_type: self.plugin_type.to_string(),
            command: self.command.to_string(),
            status,
            output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn run_with_env(env: Vec<(&'static str, String)>) -> Vec<(String, Option<String>)> {
        let run = PluginRun {
            plugin_type: "p",
            binary: Path::new("/bin/true"),
            command: "ADD",
            env,
            stdin: b"",
            deadline: Instant::now(),
            timeout: Duration::ZERO,
        };
        let text = |s: &OsStr| s.to_string_lossy().into_owned();
        run.command().get_envs().map(|(k, v)| (text(k), v.map(text))).collect()
    }

    #[test]
    fn a_trace_context_given_replaces_the_inherited_one_whole() {
        let envs = run_with_env(vec![(
            "TRACEPARENT",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        )]);
        let find = |key: &str| envs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        assert_eq!(
            find("TRACEPARENT"),
            Some(Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()))
        );
        // Removed from what the plugin inherits, so a stale state cannot join the new trace.
        assert_eq!(find("TRACESTATE"), Some(None));
        assert_eq!(find("BAGGAGE"), Some(None));
    }

    #[test]
    fn without_a_trace_context_the_inherited_one_passes_through() {
        let envs = run_with_env(vec![("CNI_COMMAND", "ADD".into())]);
        assert!(envs.iter().all(|(k, _)| !TRACE_VARS.contains(&k.as_str())), "{envs:?}");
        // libcni's own variables are always cleared before this run's are set.
        assert!(envs.iter().any(|(k, v)| k == "CNI_NETNS" && v.is_none()), "{envs:?}");
    }
}
