//! Running another plugin with the same environment and configuration (spec section 4),
//! typically the IPAM plugin named in `ipam.type`.
//!
//! [`ipam_add`] returns a guard: if the upper plugin's ADD fails after the delegated ADD
//! succeeded, dropping the guard sends the delegate a DEL, so no address leaks.
//!
//! A multi-call binary (every cni-rs plugin in one executable, installed as links) can
//! [register](run_own_plugins_in_process) its plugins: a delegation whose binary in
//! CNI_PATH turns out to be this very executable then runs the delegate's code in this
//! process, through the same entry point ([`crate::run_with`]) with the same environment
//! and stdin, and reads its output exactly as it would read the child's. The only thing
//! skipped is starting a process (~0.9 ms for host-local under bridge, a third of a
//! bridge ADD). Any other binary — a Go host-local, say — is executed as usual.

use crate::request::{Command, Request};
use crate::Plugin;
use cni_types::validate::validate_plugin_type;
use cni_types::{CniError, CniResult, ErrorCode};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::OnceLock;

/// Finds the plugin of a given type among this executable's own, if it has one.
pub type OwnPlugins = fn(&str) -> Option<Box<dyn Plugin>>;

static OWN_PLUGINS: OnceLock<OwnPlugins> = OnceLock::new();

/// Declares the plugins this executable contains, so that delegations to it run in
/// process (see the module documentation). Meant for a multi-call binary's `main`.
pub fn run_own_plugins_in_process(own: OwnPlugins) {
    let _ = OWN_PLUGINS.set(own);
}

/// The registered plugin for `plugin_type`, if `binary` is this executable (the same
/// file: a hard link or a symlink to it).
fn own_plugin(binary: &Path, plugin_type: &str) -> Option<Box<dyn Plugin>> {
    static THIS_EXECUTABLE: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    let own = OWN_PLUGINS.get()?;
    let identity = |path: &Path| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    // The path /proc/self/exe names, rather than the magic link itself: the same file
    // (a replaced or deleted binary simply does not match), and valgrind, which emulates
    // the link, then profiles the in-process path (`tools/link-order.py` relies on that).
    let this = THIS_EXECUTABLE.get_or_init(|| std::env::current_exe().ok().and_then(|exe| identity(&exe)));
    (this.is_some() && identity(binary) == *this).then(|| own(plugin_type)).flatten()
}

/// The first regular, executable file named `plugin_type` in the search path.
pub fn find_in_path(plugin_type: &str, path: &[PathBuf]) -> Result<PathBuf, CniError> {
    use std::os::unix::fs::PermissionsExt;
    validate_plugin_type(plugin_type)?;
    path.iter()
        .map(|dir| dir.join(plugin_type))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            CniError::invalid_config(format!("failed to find plugin {plugin_type:?} in path {path:?}"))
        })
}

/// Runs `plugin_type` for `command` with the request's environment and `stdin`. Returns
/// its stdout on success; a failure is the plugin's own error object when it printed one.
pub fn exec(req: &Request, plugin_type: &str, command: Command, stdin: &[u8]) -> Result<Vec<u8>, CniError> {
    let binary = find_in_path(plugin_type, &req.path)?;
    let env = [
        ("CNI_COMMAND", command.as_str().to_string()),
        ("CNI_CONTAINERID", req.container_id.clone()),
        ("CNI_NETNS", req.netns.clone()),
        ("CNI_IFNAME", req.ifname.clone()),
        ("CNI_ARGS", req.args.to_env_string()),
        ("CNI_PATH", std::env::join_paths(&req.path).unwrap_or_default().to_string_lossy().into_owned()),
    ];
    if let Some(plugin) = own_plugin(&binary, plugin_type) {
        // Everything else a child would inherit is this process's environment.
        let lookup = |key: &str| {
            env.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).or_else(|| std::env::var(key).ok())
        };
        let mut stdout = Vec::new();
        let code = crate::skel::run_delegated(
            &*plugin,
            &lookup,
            &mut &stdin[..],
            &mut stdout,
            &mut std::io::stderr(),
        );
        return output(plugin_type, code == 0, stdout, format_args!("exit code {code}, in process"));
    }
    let mut process = Process::new(&binary);
    process
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = spawn_retrying_busy(&mut process, &binary)?;
    if let Some(mut input) = child.stdin.take() {
        // A plugin that exits without reading stdin closes the pipe: not our failure.
        let _ = input.write_all(stdin);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::io(format!("waiting for plugin {plugin_type:?}: {e}")))?;
    output(plugin_type, out.status.success(), out.stdout, format_args!("{}", out.status))
}

/// A delegate's stdout on success; on failure its error object, or an error saying it
/// printed none.
fn output(
    plugin_type: &str,
    success: bool,
    stdout: Vec<u8>,
    status: std::fmt::Arguments<'_>,
) -> Result<Vec<u8>, CniError> {
    if success {
        return Ok(stdout);
    }
    Err(serde_json::from_slice::<CniError>(&stdout).unwrap_or_else(|_| {
        CniError::internal(format!(
            "plugin {plugin_type:?} failed ({status}) without an error object: {}",
            String::from_utf8_lossy(&stdout).trim()
        ))
    }))
}

/// A binary being replaced (an upgrade in progress) cannot be executed for a moment
/// (ETXTBSY); try a few times before giving up.
fn spawn_retrying_busy(process: &mut Process, binary: &Path) -> Result<std::process::Child, CniError> {
    let mut attempt = 0;
    loop {
        match process.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.raw_os_error() == Some(26 /* ETXTBSY */) && attempt < 5 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(10 << attempt));
            }
            Err(e) => return Err(CniError::io(format!("cannot execute {}: {e}", binary.display()))),
        }
    }
}

/// ADD through a delegate; parses its (abbreviated) result.
pub fn add(req: &Request, plugin_type: &str, stdin: &[u8]) -> Result<CniResult, CniError> {
    let out = exec(req, plugin_type, Command::Add, stdin)?;
    CniResult::parse_bytes(&out, req.version).map(|(r, _)| r).map_err(|e| {
        CniError::new(ErrorCode::Decode, format!("cannot read the result of plugin {plugin_type:?}: {e}"))
    })
}

/// A delegated ADD that is undone on drop unless [`DelegatedAdd::keep`] is called (the release verb of every rollback guard in the workspace).
pub struct DelegatedAdd<'a> {
    req: &'a Request,
    plugin_type: String,
    result: CniResult,
    armed: bool,
}

impl DelegatedAdd<'_> {
    pub fn result(&self) -> &CniResult {
        &self.result
    }

    /// The upper plugin's ADD succeeded: keep the delegate's allocation.
    pub fn keep(mut self) -> CniResult {
        self.armed = false;
        std::mem::take(&mut self.result)
    }
}

impl Drop for DelegatedAdd<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = exec(self.req, &self.plugin_type, Command::Del, &self.req.stdin) {
                eprintln!("rolling back {} ADD failed: {e}", self.plugin_type);
            }
        }
    }
}

fn ipam_type(req: &Request) -> Result<&str, CniError> {
    match req.conf.ipam.as_ref().map(|i| i.ipam_type.as_str()) {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(CniError::invalid_config("ipam.type is missing")),
    }
}

/// ADD through the configured IPAM plugin, guarded.
pub fn ipam_add(req: &Request) -> Result<DelegatedAdd<'_>, CniError> {
    let plugin_type = ipam_type(req)?.to_string();
    let result = add(req, &plugin_type, &req.stdin)?;
    Ok(DelegatedAdd { req, plugin_type, result, armed: true })
}

/// Sends the request's own verb (DEL, CHECK, GC, STATUS) to the configured IPAM plugin.
pub fn ipam_forward(req: &Request) -> Result<(), CniError> {
    exec(req, ipam_type(req)?, req.command, &req.stdin).map(|_| ())
}

/// Whether the configured IPAM plugin talks over the container's interface, so that the
/// interface must exist before its ADD: `dhcp` and `slaac` do. An interface plugin asks
/// any other IPAM plugin first, so that a request IPAM refuses (a bad range, a malformed
/// or taken address) has created nothing yet.
pub fn ipam_needs_interface(req: &Request) -> bool {
    req.conf.ipam.as_ref().is_some_and(|i| i.ipam_type == "dhcp" || ipam_is_slaac_type(&i.ipam_type))
}

/// Whether the configured IPAM plugin is `slaac`, which has the kernel take the addresses
/// routers advertise: only then may the container interface autoconfigure addresses.
pub fn ipam_autoconfigures(req: &Request) -> bool {
    req.conf.ipam.as_ref().is_some_and(|i| ipam_is_slaac_type(&i.ipam_type))
}

fn ipam_is_slaac_type(ipam_type: &str) -> bool {
    ipam_type == "slaac"
}

/// [`ipam_forward`] when the configuration names an IPAM plugin; nothing otherwise.
pub fn ipam_forward_if_configured(req: &Request) -> Result<(), CniError> {
    if has_ipam(req) {
        ipam_forward(req)?;
    }
    Ok(())
}

/// Whether the configuration names an IPAM plugin at all.
pub fn has_ipam(req: &Request) -> bool {
    req.conf.ipam.as_ref().is_some_and(|i| !i.ipam_type.is_empty())
}
