//! Where a netplugin finds its CNI plugins, keeps its state and reads the image's defaults.
//!
//! Inside a plugin image the defaults are right and nothing needs setting. The variables
//! exist so the same executables also run outside an image (tests, a host install).

use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The CNI plugin directories, `:`-separated (the CNI convention).
pub const CNI_PATH_VAR: &str = "CNI_PATH";
/// Where the plugins live in our images.
pub const DEFAULT_CNI_PATH: &str = "/opt/cni/bin";
/// The netplugin's state: libcni's result cache (keyed by network, container UUID and
/// interface), the DHCP daemon's leases, pid file and log, the setup lock.
pub const STATE_DIR_VAR: &str = "KURMA_NETPLUGIN_STATE_DIR";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/kurma-netplugin";
/// A JSON object of configuration keys an image supplies when an entry leaves them out
/// (the lo-netplugin image says `{"type": "loopback"}`, so the seed's `lo` entry, which
/// has no `type`, works).
pub const DEFAULTS_VAR: &str = "KURMA_NETPLUGIN_DEFAULTS";
pub const DEFAULT_DEFAULTS_FILE: &str = "/opt/network/defaults.json";

/// The Kurma specification gives each executable one minute. The CNI plugins it runs get
/// less, so that a stuck plugin is killed and reported by the netplugin itself (with its
/// rollback done) before the host's limit is reached.
pub const PLUGIN_TIME_LIMIT: Duration = Duration::from_secs(45);
/// Overrides [`PLUGIN_TIME_LIMIT`] (seconds, fractions allowed; at most 50, which leaves
/// a rollback time inside the minute).
pub const PLUGIN_TIME_LIMIT_VAR: &str = "KURMA_NETPLUGIN_PLUGIN_TIMEOUT";
const MAX_PLUGIN_TIME_LIMIT: f64 = 50.0;
/// How long each plugin query of `setup` (VERSION of the plugin and its IPAM plugin,
/// STATUS) may take: with the daemon start, `setup` stays inside its minute.
pub const SETUP_QUERY_TIME_LIMIT: Duration = Duration::from_secs(10);
/// How long `setup` waits for a background daemon it started to answer.
pub const DAEMON_START_LIMIT: Duration = Duration::from_secs(10);

/// The settings of one run, from the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cni_path: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub defaults_file: PathBuf,
    /// How long one CNI operation of the network's plugin may take.
    pub plugin_time_limit: Duration,
}

impl Settings {
    pub fn from_env() -> Settings {
        let var = |name: &str, default: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
        };
        Settings {
            cni_path: var(CNI_PATH_VAR, DEFAULT_CNI_PATH)
                .split(':')
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
            state_dir: var(STATE_DIR_VAR, DEFAULT_STATE_DIR).into(),
            defaults_file: var(DEFAULTS_VAR, DEFAULT_DEFAULTS_FILE).into(),
            plugin_time_limit: std::env::var(PLUGIN_TIME_LIMIT_VAR)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|secs| *secs > 0.0)
                .map(|secs| Duration::from_secs_f64(secs.min(MAX_PLUGIN_TIME_LIMIT)))
                .unwrap_or(PLUGIN_TIME_LIMIT),
        }
    }

    /// The image's default keys; none when the file does not exist.
    pub fn defaults(&self) -> Result<Map<String, Value>, String> {
        match std::fs::read(&self.defaults_file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a JSON object: {e}", self.defaults_file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
            Err(e) => Err(format!("{}: {e}", self.defaults_file.display())),
        }
    }

    /// libcni's result cache: one file per network, container UUID and interface.
    pub fn cache_dir(&self) -> PathBuf {
        self.state_dir.join("cni")
    }

    /// The DHCP daemon's state directory (its leases, pid file and log).
    pub fn dhcp_dir(&self) -> PathBuf {
        self.state_dir.join("dhcp")
    }
}
