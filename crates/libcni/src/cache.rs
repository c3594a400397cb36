//! The result cache, in the reference's format and place:
//! `<cacheDir>/results/<network>-<containerID>-<ifname>` holding
//! `{"kind":"cniCacheV1","containerId","config"(base64),"ifName","networkName","netns",
//! "cniArgs":[[k,v]],"capabilityArgs","result"}`. A bare result (the older format) is
//! accepted when reading.
//!
//! Writes are atomic (temp file in the same directory, then rename), so a reader or a
//! crashed runtime sees the old file or the new one, never half of one. They are not
//! fsynced, like the reference's: that cost 1–2 ms per ADD, and would only protect
//! against a crash of the machine, after which a missing or empty entry is harmless —
//! files that are empty or corrupt (a power cut, older writers, a full disk) are reported
//! as such, and the callers make sure they never block a DEL or a GC, which then use the
//! configuration at hand.

use crate::error::{Error, Result};
use base64::Engine;
use cni_os::Idempotent;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub(crate) const CACHE_KIND: &str = "cniCacheV1";

/// One cached attachment.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkAttachment {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    /// The configuration bytes the attachment was made with.
    pub config: Vec<u8>,
    pub netns: String,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
    /// The ADD result as cached (in the list's version at the time).
    pub result: Option<Value>,
    /// The cache file.
    pub path: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    kind: String,
    #[serde(rename = "containerId")]
    container_id: String,
    #[serde(with = "base64_bytes")]
    config: Vec<u8>,
    #[serde(rename = "ifName")]
    ifname: String,
    #[serde(rename = "networkName")]
    network: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    netns: String,
    #[serde(rename = "cniArgs", default, skip_serializing_if = "Vec::is_empty")]
    cni_args: Vec<(String, String)>,
    #[serde(rename = "capabilityArgs", default, skip_serializing_if = "Map::is_empty")]
    capability_args: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// `<cacheDir>/results/<network>-<containerID>-<ifname>`.
pub fn cache_path(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    cache_dir.join("results").join(format!("{network}-{container_id}-{ifname}"))
}

/// Writes the cache entry for an attachment, atomically.
pub(crate) fn write(path: &Path, attachment: &NetworkAttachment) -> Result<()> {
    let file = CacheFile {
        kind: CACHE_KIND.to_string(),
        container_id: attachment.container_id.clone(),
        config: attachment.config.clone(),
        ifname: attachment.ifname.clone(),
        network: attachment.network.clone(),
        netns: attachment.netns.clone(),
        cni_args: attachment.cni_args.clone(),
        capability_args: attachment.capability_args.clone(),
        result: attachment.result.clone(),
    };
    let bytes = serde_json::to_vec(&file).expect("a cache entry always serialises");
    write_atomically(path, &bytes)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("cache paths have a directory");
    let cache_err = |what: &str, e: std::io::Error| Error::Cache {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| cache_err("creating its directory", e))?;
    // The workspace's one atomic write: an exclusive 0600 temporary file beside the entry,
    // never through a link, renamed over it. Unsynced, like the reference's cache: the
    // entries describe attachments, which a crash's reboot ends too.
    cni_os::fs::write_atomic(path, bytes, 0o600, cni_os::fs::Durability::Unsynced)
        .map_err(|e| cache_err("writing", e))
}

/// The largest cache entry read: a result (at most the 16 MiB a plugin may print) and the
/// list's configuration, base64-encoded, with room to spare.
const MAX_ENTRY: u64 = 64 << 20;

/// Reads a cache file. `Ok(None)` when there is none; `Err` when it exists but is empty,
/// corrupt, or not a cache entry, and, as for every state file (docs/security.md), when a
/// link, a FIFO or anything but a regular file is in its place or it is longer than
/// [`MAX_ENTRY`]: read without following a link, without blocking, and bounded.
pub(crate) fn read(path: &Path) -> Result<Option<NetworkAttachment>> {
    let read = cni_os::fs::read_nofollow_limited(path, MAX_ENTRY);
    let Some(bytes) = read.map_err(|e| Error::Cache { path: path.to_path_buf(), reason: e.to_string() })?
    else {
        return Ok(None);
    };
    parse(&bytes, path).map(Some)
}

pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<NetworkAttachment> {
    let corrupt = |reason: String| Error::Cache { path: path.to_path_buf(), reason };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(corrupt("the file is empty".into()));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    if !value.is_object() {
        return Err(corrupt("not a JSON object".into()));
    }
    match value.get("kind") {
        Some(Value::String(kind)) if kind == CACHE_KIND => {
            let file: CacheFile =
                serde_json::from_value(value).map_err(|e| corrupt(format!("invalid entry: {e}")))?;
            Ok(NetworkAttachment {
                container_id: file.container_id,
                network: file.network,
                ifname: file.ifname,
                config: file.config,
                netns: file.netns,
                cni_args: file.cni_args,
                capability_args: file.capability_args,
                result: file.result,
                path: path.to_path_buf(),
            })
        }
        Some(other) => Err(corrupt(format!("unknown cache kind {other}"))),
        // The older format: the bare result. What else it described is in the file name
        // only, which cannot be split reliably; callers that need it already know it.
        None => Ok(NetworkAttachment {
            container_id: String::new(),
            network: String::new(),
            ifname: String::new(),
            config: Vec::new(),
            netns: String::new(),
            cni_args: Vec::new(),
            capability_args: Map::new(),
            result: Some(value),
            path: path.to_path_buf(),
        }),
    }
}

/// Removes a cache file; a file that is already gone is fine.
pub(crate) fn remove(path: &Path) -> Result<()> {
    let removed = std::fs::remove_file(path).ignore_missing();
    removed.map(drop).map_err(|e| Error::Cache { path: path.to_path_buf(), reason: format!("removing: {e}") })
}

/// How old a temporary file of a version before cni-os's locked writes (`.tmp-*`) must be
/// before GC takes it for abandoned: those writers held no lock, so only age can tell.
pub(crate) const LEGACY_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the temporary files under `<cacheDir>/results` that no writer holds any more (a
/// runtime killed between creating its entry's temporary file and renaming it: cni-os's
/// `.<entry>.tmp.<pid>`, whose writer holds a lock on it while it lives), and older
/// versions' `.tmp-*` last modified before `now - LEGACY_TEMP_AGE`. Returns the paths
/// removed.
pub(crate) fn remove_abandoned_temp_files(
    cache_dir: &Path,
    now: std::time::SystemTime,
) -> Result<Vec<PathBuf>> {
    let dir = cache_dir.join("results");
    let mut removed = cni_os::fs::remove_abandoned_temp_files(&dir).map_err(|e| Error::Cache {
        path: dir.clone(),
        reason: format!("removing abandoned temporary files: {e}"),
    })?;
    let listed = std::fs::read_dir(&dir).ignore_missing();
    let Some(entries) = listed.map_err(|e| Error::io(format!("reading {}", dir.display()), e))? else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(".tmp-") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let old = meta.modified().is_ok_and(|m| now.duration_since(m).is_ok_and(|age| age > LEGACY_TEMP_AGE));
        if meta.is_file() && old {
            remove(&entry.path())?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

/// Every readable `cniCacheV1` entry under `<cacheDir>/results`, in file-name order.
/// Unreadable, corrupt and legacy files are skipped: they must never stop a listing or a
/// GC.
pub(crate) fn list(cache_dir: &Path) -> Result<Vec<NetworkAttachment>> {
    let dir = cache_dir.join("results");
    let listed = std::fs::read_dir(&dir).ignore_missing();
    let Some(entries) = listed.map_err(|e| Error::io(format!("reading {}", dir.display()), e))? else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    paths.sort();
    Ok(paths.iter().filter_map(|p| read(p).ok().flatten()).filter(|a| !a.network.is_empty()).collect())
}

/// Base64 as the cache stores configuration bytes (for tests and tools).
pub fn encode_config(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn attachment() -> NetworkAttachment {
        NetworkAttachment {
            container_id: "ctr".into(),
            network: "net".into(),
            ifname: "eth0".into(),
            config: br#"{"name":"net"}"#.to_vec(),
            netns: "/run/netns/x".into(),
            cni_args: vec![("K".into(), "V".into())],
            capability_args: Map::new(),
            result: Some(serde_json::json!({"cniVersion": "1.0.0"})),
            path: PathBuf::new(),
        }
    }

    #[test]
    fn written_entries_read_back_with_private_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = cache_path(dir.path(), "net", "ctr", "eth0");
        write(&path, &attachment()).unwrap();
        let back = read(&path).unwrap().unwrap();
        assert_eq!(back, NetworkAttachment { path: path.clone(), ..attachment() });
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let text: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(text["kind"], "cniCacheV1");
        assert_eq!(text["config"], "eyJuYW1lIjoibmV0In0=");
        assert_eq!(text["cniArgs"], serde_json::json!([["K", "V"]]));
        assert!(text.get("capabilityArgs").is_none());
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn abandoned_temp_files_are_removed_live_ones_and_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        let entry = cache_path(dir.path(), "net", "ctr", "eth0");
        write(&entry, &attachment()).unwrap();
        let results = entry.parent().unwrap();
        let now = std::time::SystemTime::now();
        let make = |name: &str, age: u64| {
            let path = results.join(name);
            let file = std::fs::File::create(&path).unwrap();
            file.set_modified(now - std::time::Duration::from_secs(age)).unwrap();
            (path, file)
        };
        let (legacy_abandoned, _) = make(".tmp-abandoned", 120);
        let (legacy_in_flight, _) = make(".tmp-in-flight", 5);
        // A fresh temporary file of a writer killed a moment ago: nobody holds its lock.
        let (killed_now, _) = make(".net-cnitool-0123-eth0.tmp.4242", 0);
        // One a live writer holds, however old.
        let (live, live_writer) = make(".net-cnitool-4567-eth0.tmp.4243", 120);
        cni_os::lock::exclusive(&live_writer).unwrap();
        // An old cache entry is not a temporary file, whatever its age.
        std::fs::File::options()
            .write(true)
            .open(&entry)
            .unwrap()
            .set_modified(now - LEGACY_TEMP_AGE * 10)
            .unwrap();
        let mut removed = remove_abandoned_temp_files(dir.path(), now).unwrap();
        removed.sort();
        let mut expected = vec![legacy_abandoned.clone(), killed_now.clone()];
        expected.sort();
        assert_eq!(removed, expected);
        assert!(!legacy_abandoned.exists() && !killed_now.exists());
        assert!(legacy_in_flight.exists() && live.exists());
        assert!(read(&entry).unwrap().is_some());
        drop(live_writer);
        assert_eq!(remove_abandoned_temp_files(dir.path(), now).unwrap(), vec![live]);
        // No results directory at all is nothing to do.
        let empty = tempfile::tempdir().unwrap();
        assert!(remove_abandoned_temp_files(empty.path(), now).unwrap().is_empty());
    }

    #[test]
    fn links_fifos_and_oversized_entries_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let entry = cache_path(dir.path(), "net", "ctr", "eth0");
        write(&entry, &attachment()).unwrap();
        let results = entry.parent().unwrap();
        let link = results.join("net-link-eth0");
        std::os::unix::fs::symlink(&entry, &link).unwrap();
        assert!(matches!(read(&link), Err(Error::Cache { .. })), "a link is not followed");
        let fifo = results.join("net-fifo-eth0");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(matches!(read(&fifo), Err(Error::Cache { .. })), "a FIFO is refused, not waited on");
        let huge = results.join("net-huge-eth0");
        std::fs::File::create(&huge).unwrap().set_len(MAX_ENTRY + 1).unwrap();
        let Err(Error::Cache { reason, .. }) = read(&huge) else { panic!("an oversized entry was read") };
        assert!(reason.contains("longer than"), "{reason}");
        // The listing skips them all and still finds the real entry.
        assert_eq!(list(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn empty_and_corrupt_files_are_errors_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        assert!(read(&path).unwrap().is_none());
        for bad in [&b""[..], b"  \n", b"{\"kind\":\"cniCacheV1\"", b"[1]", b"{\"kind\":\"other\"}"] {
            std::fs::write(&path, bad).unwrap();
            assert!(matches!(read(&path), Err(Error::Cache { .. })), "{bad:?}");
        }
    }

    #[test]
    fn a_bare_result_is_the_legacy_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = cache_path(dir.path(), "net", "ctr", "eth0");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, r#"{"cniVersion":"0.3.1","ips":[]}"#).unwrap();
        let entry = read(&path).unwrap().unwrap();
        assert_eq!(entry.result.unwrap()["cniVersion"], "0.3.1");
        // Legacy entries carry no attachment identity, so listings skip them.
        assert!(list(dir.path()).unwrap().is_empty());
    }
}
