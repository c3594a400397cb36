//! The plugin entry point: environment and stdin in, result or error JSON out.

use crate::request::{Command, Request};
use crate::Plugin;
use cni_types::args::CniArgs;
use cni_types::validate::{validate_container_id, validate_interface_name, validate_network_name};
use cni_types::{CniError, ErrorCode, NetConf, TraceContext, Version};
use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Where the SDK reads CNI_* variables from: the process environment in production, a
/// map in tests.
pub trait Environment {
    fn var(&self, key: &str) -> Option<String>;
}

struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl<F: Fn(&str) -> Option<String>> Environment for F {
    fn var(&self, key: &str) -> Option<String> {
        self(key)
    }
}

/// Runs `plugin` for this process and exits with the CNI exit code.
pub fn run(plugin: &dyn Plugin) -> ! {
    let code = run_with(
        plugin,
        &ProcessEnvironment,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    );
    std::process::exit(code)
}

/// Runs `plugin` against the given environment and streams; returns the exit code
/// (0 on success, 1 after printing an error JSON on `stdout` and its text on `stderr`).
pub fn run_with(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    run_reporting(plugin, env, stdin, stdout, stderr, ErrorLine::Logged)
}

/// [`run_with`] for a plugin delegated to in process: its error goes back to the
/// delegating plugin, which reports it, so it is not logged here as well (it was
/// printed twice, both times under the delegating plugin's name).
pub(crate) fn run_delegated(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    run_reporting(plugin, env, stdin, stdout, stderr, ErrorLine::LeftToCaller)
}

/// Whether a failed run writes its error's text to stderr.
#[derive(PartialEq)]
enum ErrorLine {
    Logged,
    LeftToCaller,
}

fn run_reporting(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    error_line: ErrorLine,
) -> i32 {
    let mut version_for_errors = String::new();
    let outcome =
        catch_unwind(AssertUnwindSafe(|| dispatch(plugin, env, stdin, stderr, &mut version_for_errors)));
    let error = match outcome {
        Ok(Ok(Some(output))) => {
            return match writeln!(stdout, "{output}").and_then(|_| stdout.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    let _ = writeln!(stderr, "cannot write the result: {e}");
                    1
                }
            };
        }
        Ok(Ok(None)) => return 0,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            CniError::internal(format!("plugin panicked: {what}"))
        }
    };
    let error = if error.cni_version.is_empty() { error.with_version(version_for_errors) } else { error };
    if error_line == ErrorLine::Logged {
        // With the runtime's trace id, the line can be found from the trace that failed.
        match TraceContext::from_env(|key| env.var(key)) {
            Some(trace) => {
                let _ = writeln!(stderr, "{}: {error} (trace {})", plugin_name(), trace.trace_id());
            }
            None => {
                let _ = writeln!(stderr, "{}: {error}", plugin_name());
            }
        }
    }
    let _ = writeln!(stdout, "{}", pretty(&error));
    let _ = stdout.flush();
    1
}

fn plugin_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| PathBuf::from(a).file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "plugin".to_string())
}

/// JSON as the reference prints results and errors: indented by four spaces.
fn pretty<T: serde::Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    value.serialize(&mut ser).expect("CNI objects always serialise");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Which variables each verb needs (docs/compatibility.md, "Plugin environment").
fn required_vars(command: Option<Command>) -> &'static [&'static str] {
    match command {
        Some(Command::Add | Command::Check) => {
            &["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
        }
        Some(Command::Del) => &["CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
        Some(Command::Gc | Command::Status) => &["CNI_COMMAND", "CNI_PATH"],
        Some(Command::Version) | None => &["CNI_COMMAND"],
    }
}

fn dispatch(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    stdin: &mut dyn Read,
    stderr: &mut dyn Write,
    version_for_errors: &mut String,
) -> Result<Option<String>, CniError> {
    let command = command_from_env(plugin, env, stderr)?;
    if command == Command::Version {
        // The answer does not depend on stdin, so it is not read: VERSION never blocks.
        return Ok(Some(serde_json::to_string(&plugin.version_info()).expect("version info serialises")));
    }
    let req = read_request(plugin, env, command, stdin, version_for_errors)?;
    match command {
        Command::Add => {
            let result = plugin.add(&req)?;
            let value = result.to_value(req.version).map_err(|e| e.to_cni_error())?;
            Ok(Some(pretty(&value)))
        }
        Command::Del => plugin.del(&req).map(|_| None),
        Command::Check => plugin.check(&req).map(|_| None),
        Command::Gc => plugin.gc(&req).map(|_| None),
        Command::Status => plugin.status(&req).map(|_| None),
        Command::Version => unreachable!("answered above"),
    }
}

/// CNI_COMMAND and the variables its verb needs. Run with no CNI_COMMAND at all (a person
/// trying the binary), the plugin also says what it is on stderr.
fn command_from_env(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    stderr: &mut dyn Write,
) -> Result<Command, CniError> {
    let var = |k: &str| env.var(k).unwrap_or_default();
    let command_text = var("CNI_COMMAND");
    let command = Command::parse(&command_text);
    let missing: Vec<&str> = required_vars(command).iter().copied().filter(|k| var(k).is_empty()).collect();
    if !missing.is_empty() {
        if command_text.is_empty() {
            let info = plugin.version_info();
            let _ = writeln!(
                stderr,
                "{}\nCNI protocol versions supported: {}",
                plugin.about(),
                info.supported_versions.join(", ")
            );
        }
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("required env variables [{}] missing", missing.join(",")),
        ));
    }
    command.ok_or_else(|| {
        CniError::new(ErrorCode::InvalidEnvironment, format!("unknown CNI_COMMAND: {command_text}"))
    })
}

/// The request of a verb other than VERSION: the configuration from stdin and the
/// environment, each validated. `version_for_errors` learns the configuration's version as
/// soon as it is known, so a later failure is reported in that version's shape.
fn read_request(
    plugin: &dyn Plugin,
    env: &dyn Environment,
    command: Command,
    stdin: &mut dyn Read,
    version_for_errors: &mut String,
) -> Result<Request, CniError> {
    let var = |k: &str| env.var(k).unwrap_or_default();
    // Room for a typical configuration with its prevResult up front: read_to_end on an
    // empty buffer probes with 32-byte reads and doubles, six system calls for 2 KiB.
    let mut stdin_bytes = Vec::with_capacity(16 * 1024);
    stdin
        .read_to_end(&mut stdin_bytes)
        .map_err(|e| CniError::io(format!("error reading from stdin: {e}")))?;
    let conf: NetConf = crate::config::decode_network_config(&stdin_bytes)?;
    *version_for_errors = conf.cni_version.clone();
    if conf.name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    validate_network_name(&conf.name)?;

    let container_id = var("CNI_CONTAINERID");
    let ifname = var("CNI_IFNAME");
    if command.is_per_attachment() {
        validate_container_id(&container_id)?;
        validate_interface_name(&ifname)?;
    }

    let version = check_version(plugin, command, &conf.cni_version)?;
    let args = CniArgs::parse(&var("CNI_ARGS"))?;
    let netns = var("CNI_NETNS");
    if matches!(command, Command::Add | Command::Del)
        && !netns.is_empty()
        && !netns_override(&var("CNI_NETNS_OVERRIDE"))
    {
        refuse_own_namespace(&netns)?;
    }

    Ok(Request {
        command,
        container_id,
        netns,
        ifname,
        args,
        path: std::env::split_paths(&var("CNI_PATH")).filter(|p| !p.as_os_str().is_empty()).collect(),
        stdin: stdin_bytes,
        conf,
        version,
        trace: TraceContext::from_env(|key| env.var(key)),
    })
}

/// The configuration's version must be one the plugin speaks, and the verb must exist in
/// that version (CHECK from 0.4.0, GC and STATUS from 1.1.0).
fn check_version(plugin: &dyn Plugin, command: Command, config_version: &str) -> Result<Version, CniError> {
    let info = plugin.version_info();
    let incompatible = || {
        CniError::new(ErrorCode::IncompatibleVersion, "incompatible CNI versions").with_details(format!(
            "config's cniVersion is {config_version:?}, plugin supports {:?}",
            info.supported_versions
        ))
    };
    let version = Version::parse(config_version).map_err(|_| incompatible())?;
    if !info.supports(config_version) {
        return Err(incompatible());
    }
    let refuse = |what: &str| {
        Err(CniError::new(ErrorCode::IncompatibleVersion, format!("config version does not allow {what}"))
            .with_details(format!("config is {config_version:?}")))
    };
    match command {
        Command::Check if !version.supports_check() => refuse("CHECK"),
        Command::Gc | Command::Status if !version.supports_gc_and_status() => refuse(command.as_str()),
        _ => Ok(version),
    }
}

fn netns_override(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "1" | "true")
}

/// CNI_NETNS naming the plugin's own namespace would make it configure the host as if it
/// were the container. Refused before anything is done (the reference notices only after
/// ADD has run). A path that cannot be read is left to the plugin to report.
fn refuse_own_namespace(netns: &str) -> Result<(), CniError> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(target), Ok(own)) = (std::fs::metadata(netns), std::fs::metadata("/proc/thread-self/ns/net"))
    else {
        return Ok(());
    };
    if (target.dev(), target.ino()) == (own.dev(), own.ino()) {
        return Err(CniError::new(
            ErrorCode::InvalidNetNs,
            "CNI_NETNS is the plugin's own network namespace",
        )
        .with_details(format!(
            "{netns} is the namespace the plugin runs in; set CNI_NETNS_OVERRIDE=1 if that is meant"
        )));
    }
    Ok(())
}
