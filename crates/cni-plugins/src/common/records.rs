//! Per-attachment JSON records that a plugin keeps in a directory of its own (tuning's
//! original settings, the firewall's firewalld sources): written one at a time by ADD,
//! read back all at once by GC.

use std::fs::ReadDir;
use std::path::{Path, PathBuf};

use cni_os::fs::Durability;
use cni_sdk::CniError;
use serde::Serialize;

/// Writes `plugin`'s record atomically at `path` (0600, in private 0700 directories).
pub fn store(plugin: &str, path: &Path, record: &impl Serialize) -> Result<(), CniError> {
    let io_err =
        |what: &str, e: std::io::Error| CniError::io(format!("{plugin}: {what} {}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    cni_os::fs::private_dir(dir).map_err(|e| io_err("prepare the directory of", e))?;
    let data = serde_json::to_vec_pretty(record).expect("a record serialises");
    cni_os::fs::write_atomic(path, &data, 0o600, Durability::Unsynced).map_err(|e| io_err("write", e))
}

/// Every `*.json` file among `entries` that `load` reads as a record, with its path; a
/// file `load` passes over (`None`) is left out, and its first error is returned.
pub fn load_all<T>(
    entries: ReadDir,
    load: impl Fn(&Path) -> Result<Option<T>, CniError>,
) -> Result<Vec<(PathBuf, T)>, CniError> {
    let mut records = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "json") {
            if let Some(record) = load(&path)? {
                records.push((path, record));
            }
        }
    }
    Ok(records)
}
