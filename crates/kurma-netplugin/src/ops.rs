//! What `setup`, `add` and `del` do, on top of libcni: the netplugin is a CNI runtime for
//! the one network its stdin describes, with the plugins of its image.

use crate::settings::Settings;
use cni_types::{CniError, ErrorCode, Version};
use kurma_model::network::{KurmaResult, NetworkEntry};
use libcni::{CniConfig, NetworkConfig, NetworkConfigList, RuntimeConf};
use serde_json::{Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The network an executable was given, ready to run.
pub struct Network {
    pub entry: NetworkEntry,
    pub conf: NetworkConfig,
    pub cni: CniConfig,
}

impl Network {
    /// Reads the entry from stdin's bytes and builds the CNI configuration it runs with.
    pub fn load(stdin: &[u8], settings: &Settings) -> Result<Network, CniError> {
        let entry = NetworkEntry::from_slice(stdin).map_err(|e| CniError::invalid_config(e.to_string()))?;
        let defaults = settings.defaults().map_err(CniError::invalid_config)?;
        let conf_map = entry.cni_config(&defaults);
        if !conf_map.contains_key("type") {
            return Err(CniError::invalid_config(format!(
                "network {:?}: \"type\" is missing: name the CNI plugin to run (this image has no default)",
                entry.name
            )));
        }
        let bytes = serde_json::to_vec(&conf_map).expect("a JSON map always serialises");
        let conf = NetworkConfig::from_bytes(&bytes)
            .map_err(|e| in_network(&entry.name, CniError::invalid_config(e.to_string())))?;
        let cni = CniConfig::new(settings.cni_path.clone())
            .with_cache_dir(settings.cache_dir())
            .with_timeout(settings.plugin_time_limit);
        Ok(Network { entry, conf, cni })
    }

    pub fn name(&self) -> &str {
        &self.entry.name
    }

    pub fn plugin_type(&self) -> &str {
        self.conf.conf.get("type").and_then(Value::as_str).unwrap_or_default()
    }

    /// The IPAM plugin's type, when the configuration has one.
    pub fn ipam_type(&self) -> Option<&str> {
        self.conf.conf.get("ipam")?.get("type")?.as_str()
    }

    pub fn list(&self) -> NetworkConfigList {
        self.conf.as_list()
    }

    /// A libcni failure as this network's error.
    pub fn error(&self, err: libcni::Error) -> CniError {
        in_network(self.name(), err.to_cni_error())
    }
}

/// Prefixes an error's message with the network it is about.
pub fn in_network(name: &str, mut err: CniError) -> CniError {
    err.msg = format!("network {name:?}: {}", err.msg);
    err
}

/// The container an `add` or `del` is for: the executables' three arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub netns: String,
    pub container_uuid: String,
    pub ifname: Option<String>,
}

impl Target {
    /// Parses `NETNS UUID [IFNAME]`.
    pub fn from_args(args: &[String]) -> Result<Target, CniError> {
        let bad = |why: &str| {
            CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("{why}; usage: NETNS_PATH CONTAINER_UUID [INTERFACE]"),
            )
        };
        match args {
            [netns, uuid, rest @ ..] if rest.len() <= 1 => {
                if netns.is_empty() {
                    return Err(bad("the network namespace path is empty"));
                }
                let ifname = rest.first().filter(|s| !s.is_empty()).cloned();
                Ok(Target { netns: netns.clone(), container_uuid: uuid.clone(), ifname })
            }
            _ => Err(bad(&format!("expected 2 or 3 arguments, got {}", args.len()))),
        }
    }

    /// The interface name the plugin gets: the argument, or `lo` for the loopback plugin
    /// (the seed's `lo` network has no `containerInterface`).
    fn ifname_for(&self, network: &Network) -> Result<String, CniError> {
        match (&self.ifname, network.plugin_type()) {
            (Some(name), _) => Ok(name.clone()),
            (None, "loopback") => Ok("lo".to_string()),
            (None, plugin) => Err(in_network(
                network.name(),
                CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("plugin {plugin:?} needs an interface name: set containerInterface"),
                ),
            )),
        }
    }

    fn runtime_conf(&self, network: &Network, netns: &str) -> Result<RuntimeConf, CniError> {
        Ok(RuntimeConf::new(&self.container_uuid, netns, self.ifname_for(network)?))
    }
}

/// `add`: runs ADD of the network's plugin and converts the result. A refused (or timed
/// out) ADD is undone by libcni itself (DEL to the plugin); a result that cannot be
/// converted is rolled back here with a DEL (idempotent), so nothing of a failed
/// attachment stays either way.
pub fn add(network: &Network, target: &Target) -> Result<KurmaResult, CniError> {
    let started = Instant::now();
    let rt = target.runtime_conf(network, &target.netns)?;
    let result = network.cni.add_network(&network.conf, &rt).map_err(|e| network.error(e))?;
    KurmaResult::from_cni_json(&result.json, result.version, Some(&rt.ifname)).map_err(|e| {
        let mut err = in_network(network.name(), e.to_cni_error());
        // The rollback gets what is left of the executable's minute (less a margin to
        // print the error), however long the ADD took.
        let left = ROLLBACK_DEADLINE.saturating_sub(started.elapsed()).max(Duration::from_secs(1));
        if let Err(rollback) = del_within(network, target, Some(left)) {
            let note = format!("the rollback (DEL) failed too: {}", rollback.msg);
            err.details = if err.details.is_empty() { note } else { format!("{}; {note}", err.details) };
        }
        err
    })
}

/// `del`: runs DEL with the cached ADD result. Without a namespace (the container is gone)
/// it still runs, so host-side state (addresses, links, rules) is released; with nothing
/// left to release it succeeds.
pub fn del(network: &Network, target: &Target) -> Result<(), CniError> {
    del_within(network, target, None)
}

/// When a failed `add`'s rollback must be over, counted from the start of the `add`.
const ROLLBACK_DEADLINE: Duration = Duration::from_secs(57);

fn del_within(network: &Network, target: &Target, limit: Option<Duration>) -> Result<(), CniError> {
    let netns = if Path::new(&target.netns).exists() { target.netns.as_str() } else { "" };
    let mut rt = target.runtime_conf(network, netns)?;
    rt.timeout = limit;
    network.cni.del_network(&network.conf, &rt).map_err(|e| network.error(e))
}

/// `setup`'s validation: the plugin (and its IPAM plugin) are in the image and speak the
/// configuration's version. Returns whether the plugin speaks 1.1.0 (has STATUS).
pub fn validate(network: &Network) -> Result<bool, CniError> {
    network.cni.validate_network_list(&network.list()).map_err(|e| network.error(e))?;
    if let Some(ipam) = network.ipam_type() {
        let info = network.cni.get_version_info(ipam).map_err(|e| network.error(e))?;
        if !info.supports(network.conf.version.as_str()) {
            return Err(network.error(libcni::Error::PluginVersionUnsupported {
                plugin_type: ipam.to_string(),
                version: network.conf.version.to_string(),
                supported: info.supported_versions,
            }));
        }
    }
    let info = network.cni.get_version_info(network.plugin_type()).map_err(|e| network.error(e))?;
    Ok(info.supports(Version::V1_1_0.as_str()))
}

/// `setup`'s health check: STATUS of the plugin (asked in 1.1.0, whatever the entry's
/// version, since older versions have no STATUS). The dhcp plugin, for one, fails it
/// when its daemon does not answer.
pub fn status(network: &Network) -> Result<(), CniError> {
    let mut conf: Map<String, Value> = network.conf.conf.clone();
    conf.insert("cniVersion".into(), Value::String(Version::V1_1_0.to_string()));
    let bytes = serde_json::to_vec(&conf).expect("a JSON map always serialises");
    let status_conf = NetworkConfig::from_bytes(&bytes).map_err(|e| network.error(e))?;
    network.cni.status_network(&status_conf).map_err(|e| network.error(e))
}
