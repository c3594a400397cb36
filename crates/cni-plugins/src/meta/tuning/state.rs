//! The record of what ADD replaced, so DEL can put it back.
//!
//! One JSON file per attachment, `<dataDir>/<containerID>_<ifname>.json`, with the
//! reference plugin's layout (`mac`, `promisc`, `mtu`, `allmulti`, `txQLen`), so a record
//! written by the Go plugin is restored by ours and the other way round. We add `sysctl`
//! (original values by key, which the Go plugin ignores): DEL restores sysctls too.
//! Writes go through [`cni_os::fs::write_atomic`] (a temporary file created exclusively,
//! never through a link, 0600, renamed into place) in a private directory
//! ([`cni_os::fs::private_dir`]: 0700, ours, not a link): no reader ever sees half a record.
//! They are not fsynced: a record describes interfaces that do not survive the machine, and
//! its home (/run) is normally a tmpfs that does not either. (The syncs cost ~1 ms per ADD
//! where /run is on disk.)
//!
//! A record is read without following a link, and trusted no further than its directory:
//! every sysctl it asks to restore must pass the rule ADD applies to the configuration
//! ([`check_net_sysctl`]); one that does not (a planted `kernel.core_pattern`) is dropped
//! with a note on stderr, never written, and the rest of the record still applies.

use super::config::check_net_sysctl;
use cni_os::fs::Cleared;
use cni_os::Idempotent;
use cni_sdk::CniError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Original values, one field per thing ADD changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Originals {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// 0 means "not recorded" (the reference's encoding).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    pub tx_qlen: Option<u32>,
    /// Sysctl key (as written, `IFNAME` substituted) to its value before ADD.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctl: BTreeMap<String, String>,
    /// Whose record this is, for GC (the file name alone is ambiguous: container IDs and
    /// interface names may both contain `_`). Absent in the reference's records, which GC
    /// therefore leaves alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
}

/// The attachment a record belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Originals {
    /// Whether nothing was recorded (the owner does not count).
    pub fn is_empty(&self) -> bool {
        Originals { owner: None, ..self.clone() } == Originals::default()
    }

    /// Keeps what `older` recorded: after a repeated ADD the values read now are our own,
    /// and the first record holds the real originals.
    pub fn merge_older(&mut self, older: Originals) {
        if !older.mac.is_empty() {
            self.mac = older.mac;
        }
        if older.mtu != 0 {
            self.mtu = older.mtu;
        }
        self.promisc = older.promisc.or(self.promisc);
        self.allmulti = older.allmulti.or(self.allmulti);
        self.tx_qlen = older.tx_qlen.or(self.tx_qlen);
        for (key, value) in older.sysctl {
            self.sysctl.insert(key, value);
        }
    }

    /// Removes the sysctls that ADD would refuse to write (anything outside `net.`, a value
    /// with a newline); returns their keys. ADD never records such a key, so one in a
    /// record was put there by someone else.
    pub fn drop_refused_sysctls(&mut self) -> Vec<String> {
        let refused: Vec<String> = self
            .sysctl
            .iter()
            .filter(|(key, value)| check_net_sysctl(key, value).is_err())
            .map(|(key, _)| key.clone())
            .collect();
        for key in &refused {
            self.sysctl.remove(key);
        }
        refused
    }
}

/// The record file of one attachment.
pub fn record_path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}_{ifname}.json"))
}

/// A record holds a few values per configured setting: a few hundred bytes. One larger than
/// this was not written by ADD, and is not read to its end.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Reads a record; `None` when there is none. An unreadable (corrupt, oversized) record, or
/// something that is not a file in its place (a directory, a link), is treated as absent, with a note
/// on stderr: it cannot be restored from, and must not block DEL. Sysctls the record may not
/// restore are dropped ([`Originals::drop_refused_sysctls`]).
pub fn load(path: &Path) -> Result<Option<Originals>, CniError> {
    let bytes = match cni_os::fs::read_nofollow_limited(path, MAX_RECORD_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR) | Some(libc::ELOOP)) => {
            eprintln!("tuning: ignoring {}: not a file", path.display());
            return Ok(None);
        }
        // Oversized, or a FIFO, device or socket in the record's place.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput) => {
            eprintln!("tuning: ignoring {e}: ADD never writes such a record");
            return Ok(None);
        }
        Err(e) => return Err(CniError::io(format!("tuning: cannot read {}: {e}", path.display()))),
    };
    match serde_json::from_slice::<Originals>(&bytes) {
        Ok(mut record) => {
            for key in record.drop_refused_sysctls() {
                eprintln!(
                    "tuning: {}: not restoring sysctl {key:?}: only net.* sysctls with a one-line \
                     value may be written",
                    path.display()
                );
            }
            Ok(Some(record))
        }
        Err(e) => {
            eprintln!("tuning: ignoring unreadable record {}: {e}", path.display());
            Ok(None)
        }
    }
}

/// Writes a record atomically (0600, in a private 0700 directory of ours).
pub fn store(path: &Path, record: &Originals) -> Result<(), CniError> {
    crate::common::records::store("tuning", path, record)
}

/// Whether DEL may restore from records in `data_dir`: ADD makes it a private directory of
/// ours ([`store`]), so one that another user owns or can write into was changed since,
/// and whatever it holds may be anyone's. An absent directory holds no record: fine.
pub fn require_trusted_dir(data_dir: &Path) -> Result<(), std::io::Error> {
    cni_os::fs::require_exclusive_dir(data_dir).ignore_missing().map(drop)
}

/// Every readable record in `data_dir` with its path (for GC).
pub fn list(data_dir: &Path) -> Result<Vec<(PathBuf, Originals)>, CniError> {
    let listed = std::fs::read_dir(data_dir).ignore_missing();
    let listed =
        listed.map_err(|e| CniError::io(format!("tuning: cannot list {}: {e}", data_dir.display())))?;
    let Some(entries) = listed else { return Ok(Vec::new()) };
    crate::common::records::load_all(entries, load)
}

/// Removes whatever unreadable thing has a record's name (garbage, a link, a directory:
/// removed when empty, moved aside otherwise), so that it does not linger and a later ADD
/// can write the record. Best effort, reported on stderr: DEL must not fail over a record
/// that could not be used anyway.
pub fn remove_damaged(path: &Path) {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => cni_os::fs::clear_dir_in_place(path).map(|cleared| {
            if let Cleared::MovedAside(aside) = cleared {
                eprintln!("tuning: moved the directory {} aside to {}", path.display(), aside.display());
            }
        }),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => return,
    };
    if let Err(e) = removed {
        eprintln!("tuning: cannot remove the damaged record {}: {e}", path.display());
    }
}

/// Removes a record; a missing one is fine (DEL is idempotent).
pub fn remove(path: &Path) -> Result<(), CniError> {
    std::fs::remove_file(path)
        .ignore_missing()
        .map(drop)
        .map_err(|e| CniError::io(format!("tuning: cannot remove {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_reference_layout_and_round_trips() {
        let go = r#"{"mac":"c2:00:00:00:00:01","promisc":false,"mtu":1500,"allmulti":true,"txQLen":1000}"#;
        let record: Originals = serde_json::from_str(go).unwrap();
        assert_eq!(record.mac, "c2:00:00:00:00:01");
        assert_eq!(record.mtu, 1500);
        assert_eq!(record.tx_qlen, Some(1000));
        let dir = tempfile::tempdir().unwrap();
        let path = record_path(&dir.path().join("sub"), "ctr", "eth0");
        store(&path, &record).unwrap();
        assert_eq!(load(&path).unwrap(), Some(record));
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }

    #[test]
    fn older_record_wins_on_repeated_add() {
        let mut now = Originals { mtu: 9000, ..Default::default() };
        now.sysctl.insert("net.a".into(), "2".into());
        let mut older = Originals { mtu: 1500, promisc: Some(false), ..Default::default() };
        older.sysctl.insert("net.a".into(), "1".into());
        now.merge_older(older);
        assert_eq!(now.mtu, 1500);
        assert_eq!(now.promisc, Some(false));
        assert_eq!(now.sysctl["net.a"], "1");
    }

    #[test]
    fn a_record_never_restores_what_add_would_refuse_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctr_eth0.json");
        let planted = r#"{"mtu":1500,"sysctl":{"kernel.core_pattern":"|/tmp/x","kernel/domainname":"x",
            "net.core.somaxconn":"128","net.ipv4.conf.eth0.arp_filter":"1\n2"}}"#;
        std::fs::write(&path, planted).unwrap();
        let record = load(&path).unwrap().unwrap();
        assert_eq!(
            record.sysctl.into_iter().collect::<Vec<_>>(),
            [("net.core.somaxconn".into(), "128".into())]
        );
        assert_eq!(record.mtu, 1500, "the rest of the record still applies");
    }

    #[test]
    fn an_oversized_record_is_not_read_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctr_eth0.json");
        let padded = format!(r#"{{"mtu":1500,"mac":"{}"}}"#, " ".repeat(MAX_RECORD_BYTES as usize));
        std::fs::write(&path, padded).unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }

    #[test]
    fn a_fifo_in_a_records_place_does_not_block_del() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctr_eth0.json");
        assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
        // On a thread, so that a regression shows as a failure rather than a hung test (a
        // limit for "never returns", not a speed claim).
        let (done, wait) = std::sync::mpsc::channel();
        let reader = path.clone();
        std::thread::spawn(move || {
            let _ = done.send(load(&reader).map(|record| record.is_none()).map_err(|e| e.msg));
        });
        let ignored = wait.recv_timeout(std::time::Duration::from_secs(20)).expect("load blocked on a FIFO");
        assert_eq!(ignored, Ok(true));
        remove_damaged(&path);
        assert!(std::fs::symlink_metadata(&path).is_err());
    }

    #[test]
    fn a_link_in_a_records_place_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, r#"{"mtu":1500}"#).unwrap();
        let path = dir.path().join("ctr_eth0.json");
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(load(&path).unwrap(), None);
        remove_damaged(&path);
        assert!(std::fs::symlink_metadata(&path).is_err());
        assert!(elsewhere.exists(), "the link went, not what it pointed at");
    }

    #[test]
    fn corrupt_record_is_treated_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }
}
