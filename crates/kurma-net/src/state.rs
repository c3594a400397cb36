//! What the host side keeps on disk, so that a restarted daemon (or another CLI call)
//! knows its plugin containers and what each container is attached to.
//!
//! ```text
//! STATE_DIR/plugins/NETWORK/plugin.json   which container runs NETWORK's plugin
//! STATE_DIR/plugins/NETWORK/bundle/       its OCI bundle (config.json, rootfs/)
//! STATE_DIR/containers/UUID.json          the networks UUID is attached to, with results
//! STATE_DIR/locks/UUID.lock               flock(2): one attach/detach per container
//! STATE_DIR/runtime/                      the OCI runtime's own state (--root)
//! ```
//! Every directory of the tree is private to root (0700, [`cni_os::fs::private_dir`]): it
//! holds the unpacked plugin images, whose executables run as root, and the records
//! that say which network namespace gets which `del`. A state directory that exists but
//! belongs to another user, or a link in its place, is refused. Records are written with
//! [`cni_os::fs::write_atomic`] (0600, a temporary file renamed over the old record, never
//! through a link) and read without following a link.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// A running plugin container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PluginRecord {
    pub network: String,
    pub container_id: String,
    /// The `aci` URI the root filesystem was unpacked from.
    pub image: String,
}

/// One network a container is attached to: the metadata `add` produced.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttachedNetwork {
    pub network: String,
    /// The rendered `containerInterface`, if the network has one.
    pub interface: Option<String>,
    /// What `add` printed (the `ip4`/`ip6` result).
    pub result: Value,
}

/// A container's network metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttachRecord {
    pub uuid: String,
    pub netns: PathBuf,
    pub networks: Vec<AttachedNetwork>,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Opens (creating) the state directory at `root` and its subdirectories, each
    /// private (0700, ours; a wider one of an older install is tightened).
    pub fn open(root: &Path) -> Result<StateDir> {
        private_dir(root)?;
        for sub in ["plugins", "containers", "locks", "runtime", "scratch"] {
            private_dir(&root.join(sub))?;
        }
        let root = root.canonicalize().map_err(Error::io(root))?;
        Ok(StateDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn plugin_dir(&self, network: &str) -> PathBuf {
        self.root.join("plugins").join(network)
    }

    pub fn runtime_root(&self) -> PathBuf {
        self.root.join("runtime")
    }

    /// A fresh private directory for one executable's input and output files.
    pub fn scratch(&self, label: &str) -> PathBuf {
        let unique = cni_os::random::u64().unwrap_or(u64::from(std::process::id()));
        self.root.join("scratch").join(format!("{label}-{unique:016x}"))
    }

    pub fn read_plugin(&self, network: &str) -> Result<Option<PluginRecord>> {
        read_record(&self.plugin_dir(network).join("plugin.json"))
    }

    pub fn write_plugin(&self, record: &PluginRecord) -> Result<()> {
        write_record(&self.plugin_dir(&record.network).join("plugin.json"), record)
    }

    fn container_path(&self, uuid: &str) -> PathBuf {
        self.root.join("containers").join(format!("{uuid}.json"))
    }

    pub fn read_container(&self, uuid: &str) -> Result<Option<AttachRecord>> {
        read_record(&self.container_path(uuid))
    }

    pub fn write_container(&self, record: &AttachRecord) -> Result<()> {
        write_record(&self.container_path(&record.uuid), record)
    }

    pub fn remove_container(&self, uuid: &str) -> Result<()> {
        let path = self.container_path(uuid);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(Error::Io { path, source: err }),
            _ => Ok(()),
        }
    }

    /// Every container with a record, by UUID.
    pub fn containers(&self) -> Result<Vec<String>> {
        let dir = self.root.join("containers");
        let mut uuids: Vec<String> = std::fs::read_dir(&dir)
            .map_err(Error::io(&dir))?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
            .collect();
        uuids.sort();
        Ok(uuids)
    }

    /// Takes the per-container lock of `uuid` (released when the value is dropped): calls
    /// for one container, from any thread or process, run one after another.
    pub fn lock_container(&self, uuid: &str) -> Result<ContainerLock> {
        let path = self.root.join("locks").join(format!("{uuid}.lock"));
        let file = cni_os::fs::open_rw_nofollow(&path, 0o600).map_err(Error::io(&path))?;
        if let Err(source) = cni_os::lock::exclusive(&file) {
            return Err(Error::Io { path, source });
        }
        Ok(ContainerLock { _file: file })
    }
}

/// Holds a container's lock; closing the file releases it.
#[derive(Debug)]
pub struct ContainerLock {
    _file: File,
}

/// Checks that a container UUID is safe as a file name.
pub fn check_uuid(uuid: &str) -> std::result::Result<(), UuidError> {
    if uuid.is_empty() || uuid.len() > 128 || uuid.starts_with('.') {
        return Err(UuidError::Length { uuid: uuid.to_string() });
    }
    if !uuid.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(UuidError::Characters { uuid: uuid.to_string() });
    }
    Ok(())
}

/// Why a container UUID cannot name a file of the state tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    #[error("container UUID {uuid:?} must be 1 to 128 characters, not starting with '.'")]
    Length { uuid: String },
    #[error("container UUID {uuid:?} may hold only letters, digits, '-', '_' and '.'")]
    Characters { uuid: String },
}

/// Creates (or checks and tightens) a private directory of the state tree.
pub(crate) fn private_dir(dir: &Path) -> Result<()> {
    cni_os::fs::private_dir(dir).map_err(Error::io(dir))
}

fn read_record<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match cni_os::fs::read_nofollow(path).map_err(Error::io(path))? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| Error::State { path: path.to_path_buf(), message: err.to_string() }),
        None => Ok(None),
    }
}

/// Writes a record whole (0600), creating its private directory if needed.
pub(crate) fn write_record<T: Serialize>(path: &Path, record: &T) -> Result<()> {
    let dir = path.parent().expect("records live in a directory");
    private_dir(dir)?;
    let bytes = serde_json::to_vec_pretty(record).expect("records serialize");
    cni_os::fs::write_atomic(path, &bytes, 0o600, cni_os::fs::Durability::Synced).map_err(Error::io(path))
}
