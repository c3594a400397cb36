//! The on-disk records: one file per network and one per attachment, each replaced
//! atomically (written to a temporary file, synced, renamed), so a reader — the resolver,
//! or a plugin after a crash — sees the old file or the new one, never half of one.
//!
//! The tree is root's: directories are made 0700 and files 0600, and nothing is opened
//! through a symbolic link (a local user who could plant one must not redirect a root
//! write). Files are read with a size bound and parsed strictly; a damaged file is reported
//! by name and skipped by the resolver rather than taking the network down.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::MAX_RECORD_FILE;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    Unsafe { path: PathBuf, reason: String },
    #[error("{path}: damaged record: {reason}")]
    Damaged { path: PathBuf, reason: String },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

/// A network as the resolver serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRecord {
    /// The domain the resolver is authoritative for on this network, lower case.
    pub domain: String,
    /// Where it answers: the network's gateway addresses (port 53).
    pub listen: Vec<IpAddr>,
    /// Where other names are forwarded; empty means the host's resolv.conf.
    #[serde(default)]
    pub upstreams: Vec<SocketAddr>,
    /// The port the resolver listens on at those addresses (53, or the one the plugin
    /// redirects port 53 to).
    #[serde(default = "dns_port")]
    pub port: u16,
    /// Who may ask: the network's subnets (the prefixes of the attachments' addresses).
    /// A record without them (written before they were recorded) is served to nobody.
    #[serde(default)]
    pub subnets: Vec<ipnet::IpNet>,
    /// The host-side interface the network's clients reach the gateway through (the
    /// bridge): a query that arrives on any other interface is not answered.
    #[serde(default)]
    pub interface: Option<String>,
}

fn dns_port() -> u16 {
    53
}

/// One attachment's names and addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRecord {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub addresses: Vec<IpAddr>,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

/// Makes `dir` (and missing parents) private: created 0700, and an existing one must be a
/// real directory owned by us, which is then tightened to 0700 (cni-os's rule).
pub fn private_dir(dir: &Path) -> Result<(), StoreError> {
    cni_os::fs::private_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::PermissionDenied => {
            StoreError::Unsafe { path: dir.to_path_buf(), reason: e.to_string() }
        }
        _ => io_at(dir)(e),
    })
}

/// Replaces `path` with `bytes` atomically, 0600, never through a link. Not synced: the
/// records describe attachments, which do not survive a reboot either (the tree is on
/// /run); the rename alone means a crash never leaves half a record.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    cni_os::fs::write_atomic(path, bytes, 0o600, cni_os::fs::Durability::Unsynced).map_err(io_at(path))
}

/// Reads a record file: not through a link, a regular file, at most [`MAX_RECORD_FILE`].
/// `Ok(None)` when it does not exist.
pub fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let file = match cni_os::fs::open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StoreError::Unsafe { path: path.into(), reason: "is a symbolic link".into() })
        }
        Err(e) => return Err(io_at(path)(e)),
    };
    let meta = file.metadata().map_err(io_at(path))?;
    if !meta.is_file() {
        return Err(StoreError::Unsafe { path: path.into(), reason: "is not a regular file".into() });
    }
    if meta.len() > MAX_RECORD_FILE {
        return Err(StoreError::Damaged {
            path: path.into(),
            reason: format!("{} bytes, at most {MAX_RECORD_FILE}", meta.len()),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_RECORD_FILE + 1).read_to_end(&mut bytes).map_err(io_at(path))?;
    Ok(Some(bytes))
}

fn parse<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Damaged { path: path.into(), reason: e.to_string() })
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn socket_path(&self) -> PathBuf {
        self.root.join("dnsd.sock")
    }

    pub fn networks_dir(&self) -> PathBuf {
        self.root.join("networks")
    }

    /// `network` must be a valid CNI network name (no `/`, not `.` or `..`).
    pub fn network_dir(&self, network: &str) -> PathBuf {
        self.networks_dir().join(network)
    }

    fn hosts_dir(&self, network: &str) -> PathBuf {
        self.network_dir(network).join("hosts")
    }

    /// One file per attachment. The interface name is hex-encoded so the first `_` splits
    /// the two unambiguously (container IDs may contain `_`, hex digits never do).
    pub fn host_path(&self, network: &str, container_id: &str, ifname: &str) -> PathBuf {
        self.hosts_dir(network).join(format!("{}_{container_id}.json", hex(ifname)))
    }

    /// Makes the root, `networks/`, the network's directory and its `hosts/` private.
    pub fn prepare_network(&self, network: &str) -> Result<(), StoreError> {
        private_dir(&self.root)?;
        private_dir(&self.networks_dir())?;
        private_dir(&self.network_dir(network))?;
        private_dir(&self.hosts_dir(network))
    }

    pub fn write_network(&self, network: &str, record: &NetworkRecord) -> Result<(), StoreError> {
        let path = self.network_dir(network).join("network.json");
        write_atomic(&path, &serde_json::to_vec_pretty(record).expect("a record serialises"))
    }

    pub fn read_network(&self, network: &str) -> Result<Option<NetworkRecord>, StoreError> {
        let path = self.network_dir(network).join("network.json");
        read_bounded(&path)?.map(|b| parse(&path, &b)).transpose()
    }

    pub fn write_host(&self, network: &str, record: &HostRecord) -> Result<(), StoreError> {
        let path = self.host_path(network, &record.container_id, &record.ifname);
        write_atomic(&path, &serde_json::to_vec_pretty(record).expect("a record serialises"))
    }

    pub fn read_host(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<HostRecord>, StoreError> {
        let path = self.host_path(network, container_id, ifname);
        read_bounded(&path)?.map(|b| parse(&path, &b)).transpose()
    }

    /// Removes one attachment's file; true when there was one.
    pub fn remove_host(&self, network: &str, container_id: &str, ifname: &str) -> Result<bool, StoreError> {
        let path = self.host_path(network, container_id, ifname);
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    /// Removes the network's directory when no attachment is left in it, so the resolver
    /// stops answering on its gateway. True when it was removed.
    pub fn remove_network_if_empty(&self, network: &str) -> Result<bool, StoreError> {
        let hosts = self.hosts_dir(network);
        // Temporary files of plugins killed before their rename are nobody's record.
        let _ = cni_os::fs::remove_abandoned_temp_files(&hosts);
        match fs::read_dir(&hosts) {
            Ok(mut entries) => {
                if entries
                    .any(|e| e.map(|e| !e.file_name().to_string_lossy().starts_with('.')).unwrap_or(true))
                {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_at(&hosts)(e)),
        }
        let dir = self.network_dir(network);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_at(&dir)(e)),
        }
    }

    /// The networks on disk (directory names), at most `limit`.
    pub fn networks(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        list_names(&self.networks_dir(), limit, |n| !n.starts_with('.'))
    }

    /// Every attachment of `network`, at most `limit` files read. A file that cannot be read
    /// or parsed is returned as an error next to the good ones, so one damaged record does
    /// not hide the others.
    pub fn hosts(
        &self,
        network: &str,
        limit: usize,
    ) -> Result<Vec<Result<HostRecord, StoreError>>, StoreError> {
        let dir = self.hosts_dir(network);
        let names = list_names(&dir, limit, |n| n.ends_with(".json") && !n.starts_with('.'))?;
        Ok(names
            .into_iter()
            .map(|name| {
                let path = dir.join(&name);
                match read_bounded(&path)? {
                    Some(bytes) => parse(&path, &bytes),
                    None => Err(StoreError::Io { path, source: std::io::ErrorKind::NotFound.into() }),
                }
            })
            .collect())
    }
}

fn list_names(dir: &Path, limit: usize, keep: impl Fn(&str) -> bool) -> Result<Vec<String>, StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at(dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_at(dir))?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        if keep(&name) {
            names.push(name);
            if names.len() >= limit {
                break;
            }
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn host(id: &str, name: &str) -> HostRecord {
        HostRecord {
            container_id: id.into(),
            ifname: "eth0".into(),
            name: name.into(),
            aliases: vec!["alias".into()],
            addresses: vec!["10.0.0.2".parse().unwrap()],
        }
    }

    #[test]
    fn records_round_trip_and_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path().join("state"));
        state.prepare_network("net1").unwrap();
        let net = NetworkRecord {
            domain: "dns.podman".into(),
            listen: vec!["10.0.0.1".parse().unwrap()],
            upstreams: vec![],
            port: 1053,
            subnets: vec!["10.0.0.0/24".parse().unwrap()],
            interface: Some("br0".into()),
        };
        state.write_network("net1", &net).unwrap();
        state.write_host("net1", &host("c1", "web")).unwrap();
        assert_eq!(state.read_network("net1").unwrap(), Some(net));
        assert_eq!(state.read_host("net1", "c1", "eth0").unwrap(), Some(host("c1", "web")));
        let file = state.host_path("net1", "c1", "eth0");
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(state.network_dir("net1")).unwrap().mode() & 0o777, 0o700);
        assert_eq!(state.networks(10).unwrap(), ["net1"]);
        assert!(state.remove_host("net1", "c1", "eth0").unwrap());
        assert!(!state.remove_host("net1", "c1", "eth0").unwrap());
        assert!(state.remove_network_if_empty("net1").unwrap());
        assert!(state.networks(10).unwrap().is_empty());
    }

    #[test]
    fn a_planted_symlink_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path().join("state"));
        state.prepare_network("net1").unwrap();
        let victim = tmp.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = state.host_path("net1", "c1", "eth0");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert!(matches!(state.read_host("net1", "c1", "eth0"), Err(StoreError::Unsafe { .. })));
        // The write replaces the link itself; the file it pointed at is untouched.
        state.write_host("net1", &host("c1", "web")).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
        // A network directory that is a link is refused.
        std::os::unix::fs::symlink(tmp.path(), state.network_dir("net2")).unwrap();
        assert!(matches!(state.prepare_network("net2"), Err(StoreError::Unsafe { .. })));
    }

    #[test]
    fn damaged_files_are_reported_next_to_good_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path());
        state.prepare_network("n").unwrap();
        state.write_host("n", &host("good", "web")).unwrap();
        fs::write(state.host_path("n", "half", "eth0"), "{\"containerID\": \"half\", \"ifn").unwrap();
        fs::write(state.host_path("n", "huge", "eth0"), vec![b' '; MAX_RECORD_FILE as usize + 1]).unwrap();
        let hosts = state.hosts("n", 100).unwrap();
        assert_eq!(hosts.len(), 3);
        let good: Vec<_> = hosts.iter().filter_map(|h| h.as_ref().ok()).collect();
        assert_eq!(good, [&host("good", "web")]);
        assert!(hosts.iter().filter(|h| matches!(h, Err(StoreError::Damaged { .. }))).count() == 2);
        // Temporary files of a writer killed mid-write are not records.
        fs::write(state.host_path("n", "x", "eth0").with_file_name(".x.json.tmp.1"), "junk").unwrap();
        assert_eq!(state.hosts("n", 100).unwrap().len(), 3);
    }

    #[test]
    fn interface_names_cannot_collide_through_the_file_name() {
        let state = StateDir::new("/s");
        assert_ne!(state.host_path("n", "a_61", "b"), state.host_path("n", "a", "61_b"));
    }
}
