//! The runtime side of CNI: ADD, CHECK and DEL of a network list for one attachment.

use crate::cache::{self, cache_path, NetworkAttachment};
use crate::config::{NetworkConfig, NetworkConfigList};
use crate::error::{Error, Result};
use crate::exec::{find_plugin, PluginRun};
use crate::request::{attachment_request, RuntimeConf};
use cni_types::{CniResult, TraceContext, Version};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where plugins are found, where results are cached, and how long plugins may take.
///
/// Cheap to clone, `Send + Sync`: one value can serve every thread of a runtime. Different
/// containers may be attached concurrently; the caller must not run two operations for the
/// same attachment at once (the spec leaves that to the runtime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniConfig {
    plugin_dirs: Vec<PathBuf>,
    cache_dir: PathBuf,
    timeout: Duration,
    /// The runtime's trace context, handed to every plugin run (see [`CniConfig::with_trace`]).
    trace: Option<TraceContext>,
}

/// The result of an ADD, in the version the list speaks.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkResult {
    pub version: Version,
    /// The result JSON in `version`'s layout (`cniVersion` included).
    pub json: Value,
}

impl NetworkResult {
    /// The result as the typed model.
    pub fn parse(&self) -> Result<CniResult> {
        CniResult::from_value(self.json.clone(), self.version).map_err(|e| Error::ResultConversion {
            origin: "the result".into(),
            version: self.version,
            reason: e.to_string(),
        })
    }
}

impl CniConfig {
    /// The reference's default cache directory.
    pub const DEFAULT_CACHE_DIR: &'static str = "/var/lib/cni";
    /// How long one operation (all plugins of a chain) may take unless told otherwise.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// Plugins are looked up in `plugin_dirs`, in order.
    pub fn new<P: Into<PathBuf>>(plugin_dirs: impl IntoIterator<Item = P>) -> CniConfig {
        CniConfig {
            plugin_dirs: plugin_dirs.into_iter().map(Into::into).collect(),
            cache_dir: PathBuf::from(Self::DEFAULT_CACHE_DIR),
            timeout: Self::DEFAULT_TIMEOUT,
            trace: None,
        }
    }

    /// Plugin directories from a `CNI_PATH`-style `dir:dir` string (empty parts ignored).
    pub fn from_path_list(cni_path: &str) -> CniConfig {
        CniConfig::new(cni_path.split(':').filter(|p| !p.is_empty()))
    }

    pub fn with_cache_dir(mut self, cache_dir: impl Into<PathBuf>) -> CniConfig {
        self.cache_dir = cache_dir.into();
        self
    }

    /// The default time limit of an operation (a [`RuntimeConf`] may set its own).
    pub fn with_timeout(mut self, timeout: Duration) -> CniConfig {
        self.timeout = timeout;
        self
    }

    /// Every plugin this configuration runs gets `trace` as `TRACEPARENT`, `TRACESTATE` and
    /// `BAGGAGE`, replacing whatever context this process inherited, so a runtime that traces
    /// its requests can follow each into the plugins and daemons. The context belongs to one
    /// request: clone the shared configuration (cheap) and set it on the clone.
    pub fn with_trace(mut self, trace: TraceContext) -> CniConfig {
        self.trace = Some(trace);
        self
    }

    pub fn trace(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }

    pub fn plugin_dirs(&self) -> &[PathBuf] {
        &self.plugin_dirs
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The binary that runs plugin `plugin_type`.
    pub fn find_plugin(&self, plugin_type: &str) -> Result<PathBuf> {
        find_plugin(plugin_type, &self.plugin_dirs)
    }

    /// Runs ADD through the chain in order, each plugin getting the previous one's result
    /// (converted to the list's version); stops at the first failure, and then undoes what
    /// the plugins before it did (see [`CniConfig::undo_add`]). The final result is cached;
    /// a cache write failure fails the ADD, undone the same way.
    pub fn add_network_list(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<NetworkResult> {
        rt.validate()?;
        let op = self.operation(list, rt.timeout);
        let mut prev: Option<Value> = None;
        for (index, plugin) in list.plugins().iter().enumerate() {
            let stdin =
                attachment_request(plugin, list.name(), list.version, &rt.capability_args, prev.as_ref());
            let added = op
                .run(index, "ADD", self.attachment_env("ADD", rt), &stdin)
                .and_then(|stdout| result_in_version(list.plugin_type(index), &stdout, list.version));
            match added {
                Ok(result) => prev = Some(result),
                Err(e) => {
                    self.undo_add(list, rt, index, prev.as_ref());
                    return Err(e);
                }
            }
        }
        let json = prev.expect("a loaded list has at least one plugin");
        let attachment = NetworkAttachment {
            container_id: rt.container_id.clone(),
            network: list.name().to_string(),
            ifname: rt.ifname.clone(),
            config: list.bytes.clone(),
            netns: rt.netns.clone(),
            cni_args: rt.args.clone(),
            capability_args: rt.capability_args.clone(),
            result: Some(json.clone()),
            path: PathBuf::new(),
        };
        if let Err(e) = cache::write(&self.cache_path(list, rt), &attachment) {
            // Without its cache entry the attachment could not be deleted with its
            // prevResult or found by GC: undone now rather than left half-known.
            self.undo_add(list, rt, list.plugins().len() - 1, Some(&json));
            return Err(e);
        }
        Ok(NetworkResult { version: list.version, json })
    }

    /// After plugin `failed` refused an ADD: DEL, in reverse order, to the plugins that ran
    /// (the failed one included: it may have done part of its work), with the result so
    /// far as prevResult, so that a refused ADD leaves nothing behind (the plugins before a
    /// broken one in a list would otherwise keep their links, addresses and rules until the
    /// runtime's DEL). Best effort: the ADD's own error is what the caller needs.
    fn undo_add(&self, list: &NetworkConfigList, rt: &RuntimeConf, failed: usize, prev: Option<&Value>) {
        let op = self.operation(list, rt.timeout);
        let prev = prev.filter(|_| list.version >= Version::V0_4_0);
        for (index, plugin) in list.plugins().iter().enumerate().take(failed + 1).rev() {
            let stdin = attachment_request(plugin, list.name(), list.version, &rt.capability_args, prev);
            let _ = op.run(index, "DEL", self.attachment_env("DEL", rt), &stdin);
        }
    }

    /// Runs CHECK through the chain in order with the cached ADD result as `prevResult`.
    /// Refused below 0.4.0; does nothing when the list sets `disableCheck`.
    pub fn check_network_list(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        if !list.version.supports_check() {
            return Err(Error::VerbNotSupported {
                command: "CHECK".into(),
                version: list.version,
                needs: Version::V0_4_0,
            });
        }
        if list.list.disable_check {
            return Ok(());
        }
        rt.validate()?;
        let cached = self.cached_result(list, rt)?.ok_or_else(|| Error::NoCachedResult {
            command: "CHECK".into(),
            network: list.name().to_string(),
            container_id: rt.container_id.clone(),
            ifname: rt.ifname.clone(),
        })?;
        let op = self.operation(list, rt.timeout);
        for (index, plugin) in list.plugins().iter().enumerate() {
            let stdin = attachment_request(
                plugin,
                list.name(),
                list.version,
                &rt.capability_args,
                Some(&cached.json),
            );
            op.run(index, "CHECK", self.attachment_env("CHECK", rt), &stdin)?;
        }
        Ok(())
    }

    /// Runs DEL through the chain in reverse order with the cached ADD result as
    /// `prevResult` (from 0.4.0 on). An unreadable cache entry is removed and the DEL goes
    /// on without it; the entry is removed once every plugin succeeded.
    pub fn del_network_list(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        rt.validate()?;
        let path = self.cache_path(list, rt);
        let prev = if list.version >= Version::V0_4_0 {
            match self.cached_result(list, rt) {
                Ok(found) => found.map(|r| r.json),
                Err(_) => {
                    // Best effort: if it cannot be removed now, the final removal retries.
                    let _ = cache::remove(&path);
                    None
                }
            }
        } else {
            None
        };
        let op = self.operation(list, rt.timeout);
        for (index, plugin) in list.plugins().iter().enumerate().rev() {
            let stdin =
                attachment_request(plugin, list.name(), list.version, &rt.capability_args, prev.as_ref());
            op.run(index, "DEL", self.attachment_env("DEL", rt), &stdin)?;
        }
        cache::remove(&path)
    }

    /// ADD of a single-plugin configuration.
    pub fn add_network(&self, conf: &NetworkConfig, rt: &RuntimeConf) -> Result<NetworkResult> {
        self.add_network_list(&conf.as_list(), rt)
    }

    /// CHECK of a single-plugin configuration.
    pub fn check_network(&self, conf: &NetworkConfig, rt: &RuntimeConf) -> Result<()> {
        self.check_network_list(&conf.as_list(), rt)
    }

    /// DEL of a single-plugin configuration.
    pub fn del_network(&self, conf: &NetworkConfig, rt: &RuntimeConf) -> Result<()> {
        self.del_network_list(&conf.as_list(), rt)
    }

    /// The cached ADD result of an attachment, converted to the list's version. `Ok(None)`
    /// when nothing is cached; an error when the entry is unreadable.
    pub fn cached_result(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> Result<Option<NetworkResult>> {
        rt.validate()?;
        let path = self.cache_path(list, rt);
        let Some(entry) = cache::read(&path)? else {
            return Ok(None);
        };
        let Some(result) = entry.result else {
            return Ok(None);
        };
        let origin = format!("the cached result in {}", path.display());
        let json = convert_result(&origin, result, list.version)?;
        Ok(Some(NetworkResult { version: list.version, json }))
    }

    /// Every attachment in the cache, optionally only those of one container. Unreadable
    /// entries are skipped.
    pub fn cached_attachments(&self, container_id: Option<&str>) -> Result<Vec<NetworkAttachment>> {
        let all = cache::list(&self.cache_dir)?;
        Ok(all.into_iter().filter(|a| container_id.is_none_or(|id| a.container_id == id)).collect())
    }

    fn cache_path(&self, list: &NetworkConfigList, rt: &RuntimeConf) -> PathBuf {
        cache_path(&self.cache_dir, list.name(), &rt.container_id, &rt.ifname)
    }

    pub(crate) fn path_env(&self) -> String {
        self.plugin_dirs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":")
    }

    fn attachment_env(&self, command: &str, rt: &RuntimeConf) -> Vec<(&'static str, String)> {
        self.with_trace_env(vec![
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", rt.container_id.clone()),
            ("CNI_NETNS", rt.netns.clone()),
            ("CNI_IFNAME", rt.ifname.clone()),
            ("CNI_ARGS", rt.args_string()),
            ("CNI_PATH", self.path_env()),
        ])
    }

    /// `env` plus the trace context's variables, when there is one.
    pub(crate) fn with_trace_env(&self, mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
        env.extend(self.trace.iter().flat_map(TraceContext::env));
        env
    }

    /// One operation on `list`, all of whose plugin runs share one deadline.
    pub(crate) fn operation<'a>(
        &'a self,
        list: &'a NetworkConfigList,
        timeout: Option<Duration>,
    ) -> Operation<'a> {
        let timeout = timeout.unwrap_or(self.timeout);
        Operation { cni: self, list, timeout, deadline: Instant::now() + timeout }
    }
}

/// Plugin runs that share a deadline.
pub(crate) struct Operation<'a> {
    cni: &'a CniConfig,
    list: &'a NetworkConfigList,
    timeout: Duration,
    deadline: Instant,
}

impl Operation<'_> {
    /// Runs the list's plugin `index`.
    pub(crate) fn run(
        &self,
        index: usize,
        command: &str,
        env: Vec<(&'static str, String)>,
        stdin: &[u8],
    ) -> Result<Vec<u8>> {
        self.run_type(self.list.plugin_type(index), command, env, stdin)
    }

    /// Runs plugin `plugin_type`.
    pub(crate) fn run_type(
        &self,
        plugin_type: &str,
        command: &str,
        env: Vec<(&'static str, String)>,
        stdin: &[u8],
    ) -> Result<Vec<u8>> {
        let binary = self.cni.find_plugin(plugin_type)?;
        PluginRun {
            plugin_type,
            binary: &binary,
            command,
            env,
            stdin,
            deadline: self.deadline,
            timeout: self.timeout,
        }
        .run()
    }
}

/// A plugin's ADD output as a result in `version`.
fn result_in_version(plugin_type: &str, stdout: &[u8], version: Version) -> Result<Value> {
    let decode_error = |reason: String| Error::Decode {
        plugin_type: plugin_type.to_string(),
        command: "ADD".into(),
        reason,
        output: String::from_utf8_lossy(stdout).chars().take(512).collect(),
    };
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err(decode_error("no result printed".into()));
    }
    let value: Value = serde_json::from_slice(stdout).map_err(|e| decode_error(format!("not JSON: {e}")))?;
    if !value.is_object() {
        return Err(decode_error("not a JSON object".into()));
    }
    convert_result(&format!("plugin {plugin_type:?}"), value, version)
}

/// Converts a result (in the version it names, else `version`) to `version`.
pub(crate) fn convert_result(origin: &str, value: Value, version: Version) -> Result<Value> {
    let conversion = |reason: String| Error::ResultConversion { origin: origin.to_string(), version, reason };
    let (model, _) = CniResult::parse(value, version).map_err(|e| conversion(e.to_string()))?;
    model.to_value(version).map_err(|e| conversion(e.to_string()))
}
