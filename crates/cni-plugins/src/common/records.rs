//! Per-attachment JSON records that a plugin keeps in a directory of its own (tuning's
//! original settings, the firewall's firewalld sources), read back all at once by GC.

use std::fs::ReadDir;
use std::path::{Path, PathBuf};

use cni_sdk::CniError;

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
