//! The host side: one plugin container per configured network, and the attach/detach of
//! containers to networks through them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::{NetworkConfig, NetworkEntry};
use crate::error::{Error, Result};
use crate::fetch::FetchLimits;
use crate::runtime::Runtime;
use crate::state::StateDir;

/// The spec's limit for each of `setup`, `add` and `del`.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(60);

/// How the host side runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Where plugin bundles, records and the runtime's state live.
    pub state_dir: PathBuf,
    /// The OCI runtime binary (runc, or crun on hosts whose cgroup layout it accepts).
    pub runtime: PathBuf,
    /// Upper limit for each netplugin executable (the spec's 1 minute by default).
    pub limit: Duration,
    /// The network namespace plugins see as "the host's"; `None` is the namespace the
    /// host side runs in. (Tests give a throwaway namespace here.)
    pub host_netns: Option<PathBuf>,
    /// Plugin container ids are `<prefix>-<network>`.
    pub container_prefix: String,
    /// How much a fetch may download ([`FetchLimits::default`]: the production caps).
    pub fetch_limits: FetchLimits,
    /// PEM certificates to trust for https besides the web's usual roots (a registry
    /// with a private CA).
    pub ca_file: Option<PathBuf>,
}

impl HostOptions {
    /// Defaults: runc from `PATH`, the 1-minute limit, the current network namespace.
    pub fn new(state_dir: impl Into<PathBuf>) -> HostOptions {
        HostOptions {
            state_dir: state_dir.into(),
            runtime: PathBuf::from("runc"),
            limit: DEFAULT_LIMIT,
            host_netns: None,
            container_prefix: "kurma-net".into(),
            fetch_limits: FetchLimits::default(),
            ca_file: None,
        }
    }
}

/// The host side for one configuration and one state directory.
#[derive(Debug)]
pub struct Host {
    pub(crate) config: NetworkConfig,
    pub(crate) options: HostOptions,
    pub(crate) state: StateDir,
    pub(crate) runtime: Runtime,
}

impl Host {
    /// Opens the state directory; nothing is started yet (see [`Host::start_plugins`]).
    pub fn new(config: NetworkConfig, options: HostOptions) -> Result<Host> {
        let state = StateDir::open(&options.state_dir)?;
        let runtime = Runtime { program: options.runtime.clone(), root: state.runtime_root() };
        Ok(Host { config, options, state, runtime })
    }

    pub fn config(&self) -> &NetworkConfig {
        &self.config
    }

    pub fn state_dir(&self) -> &Path {
        self.state.root()
    }

    /// The runtime's container id for `network`'s plugin.
    pub fn container_id(&self, network: &str) -> String {
        format!("{}-{network}", self.options.container_prefix)
    }

    /// The root filesystem of `network`'s plugin container, as the host sees it.
    pub fn plugin_rootfs(&self, network: &str) -> PathBuf {
        self.state.plugin_dir(network).join("bundle/rootfs")
    }

    /// The runtime's status of `network`'s plugin container (`None`: there is none).
    pub fn plugin_status(&self, network: &str) -> Option<String> {
        self.runtime.status(&self.container_id(network))
    }

    pub(crate) fn entry(&self, network: &str) -> Result<&NetworkEntry> {
        self.config.network(network).ok_or_else(|| Error::Network {
            network: network.to_string(),
            message: "not in the configuration's container_networks".into(),
        })
    }

    /// Plugins and attached containers, as JSON.
    pub fn status(&self) -> Result<Value> {
        let mut plugins = Vec::new();
        for network in &self.config.networks {
            let record = self.state.read_plugin(&network.name)?;
            plugins.push(json!({
                "network": network.name,
                "image": network.image_uri(),
                "container": record.as_ref().map(|r| r.container_id.clone()),
                "status": record.as_ref().and_then(|r| self.runtime.status(&r.container_id)),
            }));
        }
        let mut containers = Vec::new();
        for uuid in self.state.containers()? {
            if let Some(record) = self.state.read_container(&uuid)? {
                containers.push(serde_json::to_value(record).expect("records serialize"));
            }
        }
        Ok(json!({ "plugins": plugins, "containers": containers }))
    }
}

impl NetworkEntry {
    /// The `aci` URI as configured.
    pub fn image_uri(&self) -> &str {
        &self.entry.aci
    }

    /// What the netplugin gets on stdin: the network's entry as configured.
    pub fn stdin(&self) -> Vec<u8> {
        self.entry.to_bytes()
    }
}
