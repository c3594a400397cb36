//! The daemon's leases on disk: one JSON file per attachment in the state directory
//! (default `/var/lib/cni/dhcp`), so a restarted daemon — also after `kill -9` — resumes
//! renewing the leases whose namespace still exists and forgets the rest. (The reference
//! daemon keeps leases in memory only, and loses them on every restart.)
//!
//! The directory is private (0700, the daemon's own); records are 0600 and written
//! atomically and synced (`cni_os::fs::write_atomic`): a lease must survive a power loss.
//!
//! A record is named `<network>+<containerID>+<ifname>.json` (a DHCPv6 lease's
//! `<network>+<containerID>+<ifname>+6.json`). Network names and container
//! IDs never hold a `+` and an interface name's `+` (or any byte outside
//! `[A-Za-z0-9_.-]`) is written `%XX`, so two attachments never share a file. Earlier
//! versions used `<network>-<containerID>-<ifname>.json`, which network `a-b` with container
//! `c` and network `a` with container `b-c` shared; such records are renamed when the
//! daemon starts ([`Store::migrate_legacy_names`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cni_os::fs::{read_nofollow, write_atomic, Durability};
use serde::{Deserialize, Serialize};

use super::client::ClientParams;
use super::lease::Leased;

const RECORD_VERSION: u32 = 1;
const RECORD_MODE: u32 = 0o600;

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

/// Which protocol a lease came from; an attachment may hold one lease of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Family {
    #[default]
    V4,
    V6,
}

impl Family {
    pub fn is_v4(&self) -> bool {
        *self == Family::V4
    }
}

impl From<Family> for u8 {
    fn from(f: Family) -> u8 {
        match f {
            Family::V4 => 4,
            Family::V6 => 6,
        }
    }
}

impl TryFrom<u8> for Family {
    type Error = String;
    fn try_from(n: u8) -> Result<Family, String> {
        match n {
            4 => Ok(Family::V4),
            6 => Ok(Family::V6),
            _ => Err(format!("address family {n} is neither 4 nor 6")),
        }
    }
}

impl AttachmentKey {
    /// The record's file name, one per attachment (see the module documentation).
    pub fn file_name(&self) -> String {
        format!("{}+{}+{}.json", escape(&self.network), escape(&self.container_id), escape(&self.ifname))
    }

    /// The file name of the attachment's lease of `family`: the escaped parts hold no `+`,
    /// so the v6 name's extra `+6` never makes another attachment's name.
    pub fn file_name_of(&self, family: Family) -> String {
        match family {
            Family::V4 => self.file_name(),
            Family::V6 => format!(
                "{}+{}+{}+6.json",
                escape(&self.network),
                escape(&self.container_id),
                escape(&self.ifname)
            ),
        }
    }

    /// The name earlier versions gave the record (not unique: see the module doc).
    pub fn legacy_file_name(&self) -> String {
        format!("{}-{}-{}.json", self.network, self.container_id, self.ifname)
    }
}

/// Keeps `[A-Za-z0-9_.-]` (all a validated network name or container ID holds) and
/// writes every other byte as `%XX`, so the `+` between the parts is never inside one.
fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    #[serde(flatten)]
    pub key: AttachmentKey,
    /// Absent in v4 records (those of earlier versions among them).
    #[serde(default, skip_serializing_if = "Family::is_v4")]
    pub family: Family,
    /// The namespace path as the runtime gave it (the daemon's host prefix is not in it).
    pub netns: String,
    pub params: ClientParams,
    pub lease: Leased,
}

impl Record {
    pub fn new(
        key: AttachmentKey,
        family: Family,
        netns: String,
        params: ClientParams,
        lease: Leased,
    ) -> Record {
        Record { version: RECORD_VERSION, key, family, netns, params, lease }
    }

    pub fn file_name(&self) -> String {
        self.key.file_name_of(self.family)
    }
}

/// A file in the state directory that is not a record we understand, and why.
pub type Unreadable = (PathBuf, String);

pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens the state directory, creating it 0700 (or tightening it to 0700); one owned
    /// by another user, or a link in its place, is refused.
    pub fn open(dir: &Path) -> io::Result<Store> {
        cni_os::fs::private_dir(dir)?;
        Ok(Store { dir: dir.to_path_buf() })
    }

    pub fn save(&self, record: &Record) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        write_atomic(&self.dir.join(record.file_name()), &bytes, RECORD_MODE, Durability::Synced)
    }

    /// Removes an attachment's record; a directory in its place (damage: the state
    /// directory is the daemon's alone) goes too.
    pub fn remove(&self, key: &AttachmentKey, family: Family) -> io::Result<()> {
        let path = self.dir.join(key.file_name_of(family));
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            return fs::remove_dir_all(&path);
        }
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the temporary files of saves a killed daemon never renamed into place
    /// (`.<record>.tmp.<pid>` no writer holds, and the `.<record>.tmp` of earlier versions);
    /// for a daemon starting up, before it serves. Returns the paths removed.
    pub fn remove_abandoned_temp_files(&self) -> io::Result<Vec<PathBuf>> {
        let mut abandoned = cni_os::fs::remove_abandoned_temp_files(&self.dir)?;
        for entry in fs::read_dir(&self.dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".json.tmp") && entry.file_type()?.is_file() {
                fs::remove_file(entry.path())?;
                abandoned.push(entry.path());
            }
        }
        Ok(abandoned)
    }

    /// Renames the records earlier versions wrote under `<net>-<cid>-<ifname>.json` to
    /// their collision-free names (rewritten 0600 and synced, then the old file removed),
    /// so an upgraded daemon resumes their leases. A file is taken as such a record only
    /// if the record it holds has exactly that old name. When the new name is already
    /// taken, the record there is the newer one and the old file goes. Returns the
    /// (old, new) paths moved.
    pub fn migrate_legacy_names(&self) -> io::Result<Vec<(PathBuf, PathBuf)>> {
        let mut moved = Vec::new();
        for path in self.record_paths()? {
            let Ok(record) = read_record(&path) else { continue };
            let name = file_name_of(&path);
            if !record.family.is_v4()
                || name == record.key.file_name()
                || name != record.key.legacy_file_name()
            {
                continue;
            }
            let target = self.dir.join(record.key.file_name());
            if read_nofollow(&target)?.is_none() {
                self.save(&record)?;
            }
            fs::remove_file(&path)?;
            moved.push((path, target));
        }
        Ok(moved)
    }

    /// Every record that reads back; files that do not (a foreign file, a newer version,
    /// a record under a name that is not its own) are reported in the second list and
    /// left alone.
    pub fn load_all(&self) -> io::Result<(Vec<Record>, Vec<Unreadable>)> {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for path in self.record_paths()? {
            let parsed = read_record(&path).and_then(|r| {
                if file_name_of(&path) == r.file_name() {
                    Ok(r)
                } else {
                    Err(format!("it holds the record of {}, named {}", r.key, r.file_name()))
                }
            });
            match parsed {
                Ok(r) => records.push(r),
                Err(e) => unreadable.push((path, e)),
            }
        }
        Ok((records, unreadable))
    }

    /// The files that may be records: `*.json`, not hidden.
    fn record_paths(&self) -> io::Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = file_name_of(&path);
            if !name.starts_with('.') && name.ends_with(".json") {
                paths.push(path);
            }
        }
        Ok(paths)
    }
}

fn file_name_of(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Reads one record (never through a link) and checks its version.
fn read_record(path: &Path) -> Result<Record, String> {
    let bytes = read_nofollow(path).map_err(|e| e.to_string())?.ok_or("it is gone")?;
    let record = serde_json::from_slice::<Record>(&bytes).map_err(|e| e.to_string())?;
    if record.version != RECORD_VERSION {
        return Err(format!("record version {} not understood", record.version));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        let lease: Leased = serde_json::from_value(serde_json::json!({
            "address": "10.1.0.5/24", "server_id": "10.1.0.1", "lease_secs": 60,
            "renew_secs": 30, "rebind_secs": 52, "acquired_unix": 1000
        }))
        .unwrap();
        let key = AttachmentKey { network: "net".into(), container_id: id.into(), ifname: "eth0".into() };
        let params = ClientParams {
            client_id: vec![0, 1],
            provide: vec![(12, b"pod".to_vec())],
            request: vec![1, 3],
            prefix_len: None,
        };
        Record::new(key, Family::V4, "/run/netns/x".into(), params, lease)
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
        store.remove(&record("a").key, Family::V4).unwrap();
        store.remove(&record("a").key, Family::V4).unwrap();
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
        store.remove(&key, Family::V4).unwrap();
        assert!(!dir.path().join(key.file_name()).exists());
    }

    fn key(network: &str, id: &str, ifname: &str) -> AttachmentKey {
        AttachmentKey { network: network.into(), container_id: id.into(), ifname: ifname.into() }
    }

    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn attachments_whose_old_names_collide_keep_separate_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (first, second) = (key("a-b", "c", "eth0"), key("a", "b-c", "eth0"));
        assert_eq!(first.legacy_file_name(), second.legacy_file_name(), "the old scheme's collision");
        assert_ne!(first.file_name(), second.file_name());
        for k in [&first, &second] {
            store.save(&Record { key: k.clone(), ..record("x") }).unwrap();
        }
        let (records, unreadable) = store.load_all().unwrap();
        assert!(unreadable.is_empty(), "{unreadable:?}");
        let mut keys: Vec<_> = records.into_iter().map(|r| r.key).collect();
        keys.sort();
        assert_eq!(keys, [second.clone(), first.clone()]);
        store.remove(&first, Family::V4).unwrap();
        assert_eq!(store.load_all().unwrap().0.len(), 1, "removing one leaves the other");
    }

    #[test]
    fn an_attachments_v4_and_v6_records_live_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let v4 = record("a");
        let lease6: Leased = serde_json::from_value(serde_json::json!({
            "address": "fd00::5/64", "server_duid": [0, 3, 0, 1], "iaid": 7, "preferred_secs": 50,
            "lease_secs": 60, "renew_secs": 25, "rebind_secs": 40, "acquired_unix": 1000
        }))
        .unwrap();
        let v6 = Record { family: Family::V6, lease: lease6, ..record("a") };
        store.save(&v4).unwrap();
        store.save(&v6).unwrap();
        assert_eq!(v6.file_name(), "net+a+eth0+6.json");
        let text = fs::read_to_string(dir.path().join("net+a+eth0.json")).unwrap();
        assert!(!text.contains("family"), "v4 records are written as before: {text}");
        let (mut records, unreadable) = store.load_all().unwrap();
        assert!(unreadable.is_empty(), "{unreadable:?}");
        records.sort_by_key(|r| r.family);
        assert_eq!(records, [v4.clone(), v6.clone()]);
        store.remove(&v4.key, Family::V6).unwrap();
        assert_eq!(store.load_all().unwrap().0, [v4], "removing the v6 record leaves the v4 one");
        assert_eq!(mode_of(&dir.path().join("net+a+eth0.json")), 0o600);
    }

    #[test]
    fn interface_names_cannot_forge_a_separator() {
        // An interface name may hold `+` and `%`: escaped, they never make another key's name.
        let plain = key("n", "c", "x+y");
        assert_eq!(plain.file_name(), "n+c+x%2By.json");
        assert_ne!(key("n", "c", "%2By").file_name(), key("n", "c", "+y").file_name());
        assert_eq!(key("my-net", "c1", "eth0").file_name(), "my-net+c1+eth0.json", "readable");
    }

    #[test]
    fn records_are_private_whatever_the_directory_was() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("dhcp");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let store = Store::open(&dir).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        store.save(&record("a")).unwrap();
        assert_eq!(mode_of(&dir.join(record("a").key.file_name())), 0o600);
    }

    #[test]
    fn records_under_their_old_names_are_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let old = record("c1");
        let legacy = dir.path().join(old.key.legacy_file_name());
        fs::write(&legacy, serde_json::to_vec(&old).unwrap()).unwrap();
        fs::set_permissions(&legacy, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        // A record whose name is neither its old nor its new one is not moved, nor loaded.
        let stray = dir.path().join("other.json");
        fs::write(&stray, serde_json::to_vec(&record("c2")).unwrap()).unwrap();
        let moved = store.migrate_legacy_names().unwrap();
        let renamed = dir.path().join(old.key.file_name());
        assert_eq!(moved, [(legacy.clone(), renamed.clone())]);
        assert!(!legacy.exists());
        assert_eq!(mode_of(&renamed), 0o600);
        let (records, unreadable) = store.load_all().unwrap();
        assert_eq!(records, [old]);
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].0, stray);
        assert!(store.migrate_legacy_names().unwrap().is_empty(), "nothing left to move");
    }
}
