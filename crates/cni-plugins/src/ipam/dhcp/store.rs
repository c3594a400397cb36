//! The daemon's leases on disk: one JSON file per attachment in the state directory
//! (default `/var/lib/cni/dhcp`), so a restarted daemon — also after `kill -9` — resumes
//! renewing the leases whose namespace still exists and forgets the rest. (The reference
//! daemon keeps leases in memory only, and loses them on every restart.)
//!
//! Writes are atomic: a temp file in the same directory, fsync, rename over the old file.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::client::ClientParams;
use super::lease::Lease;

const RECORD_VERSION: u32 = 1;

/// Which attachment a lease belongs to (the key the spec says IPAM state is kept under).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttachmentKey {
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl std::fmt::Display for AttachmentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.network, self.container_id, self.ifname)
    }
}

impl AttachmentKey {
    /// The file name: the libcni cache's `<net>-<containerID>-<ifname>` shape. Network
    /// names and container ids cannot hold `/`; an interface name cannot either.
    fn file_name(&self) -> String {
        format!("{}-{}-{}.json", self.network, self.container_id, self.ifname)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    #[serde(flatten)]
    pub key: AttachmentKey,
    /// The namespace path as the runtime gave it (the daemon's host prefix is not in it).
    pub netns: String,
    pub params: ClientParams,
    pub lease: Lease,
}

impl Record {
    pub fn new(key: AttachmentKey, netns: String, params: ClientParams, lease: Lease) -> Record {
        Record { version: RECORD_VERSION, key, netns, params, lease }
    }
}

/// A file in the state directory that is not a record we understand, and why.
pub type Unreadable = (PathBuf, String);

pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn open(dir: &Path) -> io::Result<Store> {
        fs::create_dir_all(dir)?;
        Ok(Store { dir: dir.to_path_buf() })
    }

    pub fn save(&self, record: &Record) -> io::Result<()> {
        let path = self.dir.join(record.key.file_name());
        let temp = self.dir.join(format!(".{}.tmp", record.key.file_name()));
        let mut file = fs::File::create(&temp)?;
        file.write_all(&serde_json::to_vec_pretty(record).map_err(io::Error::other)?)?;
        file.sync_all()?;
        fs::rename(&temp, &path)?;
        Ok(())
    }

    /// Removes an attachment's record; a directory in its place (damage: the state
    /// directory is the daemon's alone) goes too.
    pub fn remove(&self, key: &AttachmentKey) -> io::Result<()> {
        let path = self.dir.join(key.file_name());
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            return fs::remove_dir_all(&path);
        }
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the temporary files of saves a killed daemon never renamed into place
    /// (`.<record>.tmp`); for a daemon starting up, before it serves, as no save of its
    /// own can be in flight then. Returns the paths removed.
    pub fn remove_abandoned_temp_files(&self) -> io::Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        for entry in fs::read_dir(&self.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".json.tmp") && entry.file_type()?.is_file() {
                fs::remove_file(entry.path())?;
                removed.push(entry.path());
            }
        }
        Ok(removed)
    }

    /// Every record that reads back; files that do not (a foreign file, a newer version)
    /// are reported in the second list and left alone.
    pub fn load_all(&self) -> io::Result<(Vec<Record>, Vec<Unreadable>)> {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let parsed = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<Record>(&bytes).map_err(|e| e.to_string()))
                .and_then(|r| {
                    if r.version == RECORD_VERSION {
                        Ok(r)
                    } else {
                        Err(format!("record version {} not understood", r.version))
                    }
                });
            match parsed {
                Ok(r) => records.push(r),
                Err(e) => unreadable.push((path, e)),
            }
        }
        Ok((records, unreadable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "address": "10.1.0.5/24", "server_id": "10.1.0.1", "lease_secs": 60,
            "renew_secs": 30, "rebind_secs": 52, "acquired_unix": 1000
        }))
        .unwrap();
        let key = AttachmentKey { network: "net".into(), container_id: id.into(), ifname: "eth0".into() };
        let params =
            ClientParams { client_id: vec![0, 1], provide: vec![(12, b"pod".to_vec())], request: vec![1, 3] };
        Record::new(key, "/run/netns/x".into(), params, lease)
    }

    #[test]
    fn save_load_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.save(&record("a")).unwrap();
        store.save(&record("b")).unwrap();
        store.save(&record("a")).unwrap();
        fs::write(dir.path().join("junk.json"), b"{").unwrap();
        let (mut records, unreadable) = store.load_all().unwrap();
        records.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(records, [record("a"), record("b")]);
        assert_eq!(unreadable.len(), 1);
        store.remove(&record("a").key).unwrap();
        store.remove(&record("a").key).unwrap();
        assert_eq!(store.load_all().unwrap().0, [record("b")]);
    }

    #[test]
    fn abandoned_temp_files_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.save(&record("a")).unwrap();
        let abandoned = dir.path().join(".net-b-eth0.json.tmp");
        fs::write(&abandoned, b"{\"version\": 1, \"net").unwrap();
        fs::write(dir.path().join("notes.txt"), b"operator's").unwrap();
        assert_eq!(store.remove_abandoned_temp_files().unwrap(), std::slice::from_ref(&abandoned));
        assert!(!abandoned.exists());
        assert!(dir.path().join("notes.txt").exists());
        assert_eq!(store.load_all().unwrap().0, [record("a")]);
    }

    #[test]
    fn a_directory_in_a_records_place_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = record("a").key;
        fs::create_dir(dir.path().join(key.file_name())).unwrap();
        assert_eq!(store.load_all().unwrap().1.len(), 1, "reported as unreadable");
        store.remove(&key).unwrap();
        assert!(!dir.path().join(key.file_name()).exists());
    }
}
