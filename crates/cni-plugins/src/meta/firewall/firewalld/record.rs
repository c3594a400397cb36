//! Which firewalld sources are ours: ADD records, per attachment, the sources it put into
//! a zone itself, so that DEL and GC remove those and never a source the administrator
//! bound (firewalld keeps no owner of a source).
//!
//! One JSON file per attachment, `<dataDir>/<network>/<containerID>:<ifname>.json` (a
//! container ID and an interface name never contain `:` and a network name never `/`, so
//! no two attachments share a file), written atomically in private directories. `/run`
//! by default: firewalld's runtime configuration, which these sources live in, does not
//! outlive a reboot either.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cni_os::Idempotent;
use cni_sdk::{Attachment, CniError};
use serde::{Deserialize, Serialize};

/// A record holds a handful of addresses; anything larger was not written by ADD.
const MAX_RECORD_BYTES: u64 = 64 * 1024;
/// An attachment has a few addresses; a record naming more is not ours.
const MAX_SOURCES: usize = 256;

/// The sources one attachment put into firewalld's zones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub sources: Vec<Source>,
}

/// One source (`<ip>/32` or `<ip>/128`) and the zone it was added to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub zone: String,
    pub address: IpAddr,
}

impl Source {
    /// The source as firewalld names it: a host prefix, as the reference passes it.
    pub fn cidr(&self) -> String {
        source_of(self.address)
    }
}

/// A container address as a firewalld source.
pub fn source_of(address: IpAddr) -> String {
    match address {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

/// The directory of one network's records.
pub fn network_dir(data_dir: &Path, network: &str) -> PathBuf {
    data_dir.join(network)
}

/// The record file of one attachment.
pub fn record_path(data_dir: &Path, network: &str, attachment: &Attachment) -> PathBuf {
    network_dir(data_dir, network).join(format!("{}:{}.json", attachment.container_id, attachment.ifname))
}

/// Reads a record; `None` when there is none. One that cannot be ours (unreadable,
/// oversized, not a file, a zone name firewalld would not have) is ignored with a note on
/// stderr: it must not block DEL, nor have us remove sources it names.
pub fn load(path: &Path) -> Result<Option<Record>, CniError> {
    let bytes = match cni_os::fs::read_nofollow_limited(path, MAX_RECORD_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(CniError::io(format!("firewall: cannot read {}: {e}", path.display())))
        }
        Err(e) => {
            eprintln!("firewall: ignoring {}: {e}", path.display());
            return Ok(None);
        }
    };
    match serde_json::from_slice::<Record>(&bytes) {
        Ok(record) if plausible(&record) => Ok(Some(record)),
        Ok(_) => {
            eprintln!("firewall: ignoring {}: not a record ADD writes", path.display());
            Ok(None)
        }
        Err(e) => {
            eprintln!("firewall: ignoring unreadable record {}: {e}", path.display());
            Ok(None)
        }
    }
}

fn plausible(record: &Record) -> bool {
    record.sources.len() <= MAX_SOURCES && record.sources.iter().all(|s| super::valid_zone(&s.zone))
}

/// Writes a record atomically (0600, in private 0700 directories).
pub fn store(path: &Path, record: &Record) -> Result<(), CniError> {
    crate::common::records::store("firewall", path, record)
}

/// Removes a record; a missing one is fine (DEL is idempotent).
pub fn remove(path: &Path) -> Result<(), CniError> {
    std::fs::remove_file(path)
        .ignore_missing()
        .map(drop)
        .map_err(|e| CniError::io(format!("firewall: cannot remove {}: {e}", path.display())))
}

/// Every readable record of a network with its path (for GC). A directory that another
/// user owns or may write into was not made by ADD: nothing in it is trusted.
pub fn list(data_dir: &Path, network: &str) -> Result<Vec<(PathBuf, Record)>, CniError> {
    let dir = network_dir(data_dir, network);
    match cni_os::fs::require_exclusive_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CniError::io(format!("firewall: refusing records in {}: {e}", dir.display()))),
        Ok(_) => {}
    }
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| CniError::io(format!("firewall: cannot list {}: {e}", dir.display())))?;
    crate::common::records::load_all(entries, load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_one_file_per_attachment() {
        let dir = tempfile::tempdir().unwrap();
        let a = record_path(dir.path(), "net", &Attachment::new("a_b", "c"));
        let b = record_path(dir.path(), "net", &Attachment::new("a", "b_c"));
        assert_ne!(a, b);
        let record = Record {
            container_id: "a_b".into(),
            ifname: "c".into(),
            sources: vec![Source { zone: "trusted".into(), address: "fd00::5".parse().unwrap() }],
        };
        store(&a, &record).unwrap();
        assert_eq!(load(&a).unwrap(), Some(record.clone()));
        assert_eq!(record.sources[0].cidr(), "fd00::5/128");
        assert_eq!(list(dir.path(), "net").unwrap(), vec![(a.clone(), record)]);
        remove(&a).unwrap();
        remove(&a).unwrap();
        assert_eq!(load(&a).unwrap(), None);
    }

    #[test]
    fn a_record_naming_an_odd_zone_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = record_path(dir.path(), "net", &Attachment::new("c", "eth0"));
        let bad = r#"{"containerID":"c","ifname":"eth0","sources":[{"zone":"a\nb","address":"10.0.0.1"}]}"#;
        cni_os::fs::private_dir(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bad).unwrap();
        assert_eq!(load(&path).unwrap(), None);
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }
}
