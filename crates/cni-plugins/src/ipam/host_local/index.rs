//! A per-attachment index, so that "which addresses does (containerID, ifname) hold?" does
//! not read every address file of the network (the Go reference walks the whole directory
//! on every ADD and DEL, which makes both O(allocations)).
//!
//! # Layout
//! ```text
//! <dataDir>/<network>/.cni-rs-index/
//!     table      attachment key -> addresses, one fixed-size slot per attachment (see
//!                `table.rs`); keys are `<containerID>:<ifname>`, and `<containerID>:`
//!                for legacy files that record only the container ID
//!     stamp      fingerprint of the directory when the index was last known to be
//!                complete (see below)
//! ```
//! `:` appears in neither container IDs nor interface names, so keys cannot collide.
//!
//! # Why the Go plugin is not confused
//! Go's `GetByID`/`ReleaseByID` walk the network directory recursively, read every file and
//! act on a file only if its trimmed content equals `<id>\r\n<ifname>` or `<id>`; `GetByID`
//! also skips files whose name is not an address, and its allocator only ever touches
//! `<ip>` and `last_reserved_ip.<n>` names. Our index files and stamp start with a header
//! line containing spaces, which no container ID or interface name contains, so Go never
//! matches, reports or deletes them, and never mistakes the directory for an address.
//!
//! # Why the index is only a hint, and when it is complete
//! Every address found through the index is verified against the content of its address
//! file before use, so a stale entry (Go released the address, or gave it to someone else)
//! is harmless. The opposite case — Go reserved an address for an attachment, so our index
//! lacks it — is detected with a stamp. After each of our operations, still under the lock,
//! we record a fingerprint of everything a foreign writer changes when it reserves or
//! releases: the network directory's inode and mtime (creating or removing an address file
//! changes it) and, per range set, the inode, mtime, size and content of
//! `last_reserved_ip.<n>` (Go rewrites it in place on every reservation), plus the boot ID
//! (index files are not fsynced; a crash of the machine invalidates them). At the start of
//! the next operation the fingerprint is compared: equal means nobody else touched the
//! directory and the index is complete; different means one full scan rebuilds the index
//! and the stamp. The stamp's first byte is overwritten (in place: no file is created or
//! truncated) before we modify anything and the whole stamp written again at the end, so an
//! interrupted operation also forces a rebuild.
//!
//! Residual risk: directory timestamps have the kernel tick's granularity, so a foreign
//! change is missed only if, within the same tick as our last write, Go both released an
//! address and re-reserved that very address, which must also be the one recorded in
//! `last_reserved_ip.<n>`. The consequence is bounded: DEL still finds the address through
//! the prevResult, and GC releases it otherwise.
//!
//! In a directory only we write to, ADD, DEL and CHECK thus cost a constant number of file
//! operations; after Go has written, the first operation pays one scan.

use cni_os::Idempotent;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::HostLocalError;
use super::store::{rewrite_in_place, Holder, Store, LAST_RESERVED_PREFIX};
use super::table::{self, SlotTable};

pub const INDEX_DIR: &str = ".cni-rs-index";
const STAMP_FILE: &str = "stamp";
const TABLE_FILE: &str = "table";
/// v2: the table replaced one file per attachment (v1), whose files a rebuild removes.
const STAMP_HEADER: &str = "cni-rs host-local index stamp v2\n";

/// The attachment index of one locked network directory.
pub struct Index {
    /// The network directory.
    network_dir: PathBuf,
    /// Its index directory.
    dir: PathBuf,
    /// The table as last opened, kept for the operation's next lookup (an ADD looks its
    /// attachment up, then records the new address: one open instead of four). Dropped
    /// whenever the table is written, which may replace the file.
    table: RefCell<Option<SlotTable>>,
}

fn index_io<'p>(path: &'p Path, context: &'static str) -> impl FnOnce(io::Error) -> HostLocalError + 'p {
    move |e| HostLocalError::io(path, context, e)
}

/// The index key of an attachment (`ifname: None` for legacy holders), or `None` if its
/// entry could not fit a table slot (even with two IPv6 addresses); such attachments are
/// found by scanning.
fn entry_name(container_id: &str, ifname: Option<&str>) -> Option<String> {
    let name = format!("{}:{}", container_id.trim(), ifname.unwrap_or(""));
    let widest: [IpAddr; 2] =
        [Ipv6Addr::new(0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff).into(); 2];
    let ok = !container_id.trim().is_empty() && !name.contains('\0') && table::fits(&name, &widest);
    ok.then_some(name)
}

/// The kernel's boot ID, read once per process (every operation fingerprints twice).
fn boot_id() -> &'static str {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    BOOT_ID.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

impl Index {
    pub fn new(store: &Store) -> Index {
        let network_dir = store.dir().to_path_buf();
        Index { dir: network_dir.join(INDEX_DIR), network_dir, table: RefCell::new(None) }
    }

    /// Writes the stamp, creating the index directory on first use.
    fn write_stamp(&self, content: &str) -> Result<(), HostLocalError> {
        let path = self.dir.join(STAMP_FILE);
        let mut result = rewrite_in_place(&path, content.as_bytes());
        if matches!(&result, Err(e) if e.kind() == io::ErrorKind::NotFound) {
            fs::create_dir(&self.dir)
                .ignore_exists()
                .map_err(|e| HostLocalError::io(&self.dir, "creating the index directory", e))?;
            result = rewrite_in_place(&path, content.as_bytes());
        }
        result.map_err(index_io(&path, "writing the index stamp"))
    }

    fn table_path(&self) -> PathBuf {
        self.dir.join(TABLE_FILE)
    }

    /// Addresses the index lists for an attachment (unverified).
    fn read_entry(&self, container_id: &str, ifname: Option<&str>) -> Vec<IpAddr> {
        let Some(key) = entry_name(container_id, ifname) else {
            return Vec::new();
        };
        let mut cached = self.table.borrow_mut();
        if cached.is_none() {
            *cached = SlotTable::open(&self.table_path()).ok().flatten();
        }
        cached.as_ref().map(|table| table.get(&key).unwrap_or_default()).unwrap_or_default()
    }

    fn write_entry(
        &self,
        container_id: &str,
        ifname: Option<&str>,
        ips: &[IpAddr],
    ) -> Result<(), HostLocalError> {
        let Some(key) = entry_name(container_id, ifname) else {
            return Ok(());
        };
        let path = self.table_path();
        let cached = self.table.borrow_mut().take();
        let opened = match cached {
            Some(table) => Some(table),
            None => SlotTable::open(&path).map_err(index_io(&path, "opening the index table"))?,
        };
        let table = match opened {
            Some(table) => table,
            None if ips.is_empty() => return Ok(()),
            None => self.create_table(&BTreeMap::new())?,
        };
        table.set(&path, &key, ips).map_err(index_io(&path, "writing the index table"))
    }

    /// Writes a fresh table, creating the index directory on first use.
    fn create_table(&self, entries: &BTreeMap<String, Vec<IpAddr>>) -> Result<SlotTable, HostLocalError> {
        let path = self.table_path();
        self.table.borrow_mut().take();
        fs::create_dir(&self.dir)
            .ignore_exists()
            .map_err(|e| HostLocalError::io(&self.dir, "creating the index directory", e))?;
        SlotTable::create(&path, entries).map_err(index_io(&path, "writing the index table"))
    }

    /// Adds `ip` to the attachment's entry.
    pub fn add(&self, container_id: &str, ifname: &str, ip: IpAddr) -> Result<(), HostLocalError> {
        let mut ips = self.read_entry(container_id, Some(ifname));
        if !ips.contains(&ip) {
            ips.push(ip);
            self.write_entry(container_id, Some(ifname), &ips)?;
        }
        Ok(())
    }

    /// Removes `ip` from the attachment's entry.
    pub fn remove(&self, container_id: &str, ifname: &str, ip: IpAddr) -> Result<(), HostLocalError> {
        let mut ips = self.read_entry(container_id, Some(ifname));
        if ips.contains(&ip) {
            ips.retain(|held| *held != ip);
            self.write_entry(container_id, Some(ifname), &ips)?;
        }
        Ok(())
    }

    /// Drops the attachment's entries (its own and the legacy one of its container).
    pub fn forget(&self, container_id: &str, ifname: &str) -> Result<(), HostLocalError> {
        self.write_entry(container_id, Some(ifname), &[])?;
        self.write_entry(container_id, None, &[])
    }

    /// Addresses the index attributes to the attachment, including legacy files of its
    /// container. Unverified: check each against its address file.
    pub fn candidates(&self, container_id: &str, ifname: &str) -> Vec<IpAddr> {
        let mut ips = self.read_entry(container_id, Some(ifname));
        for ip in self.read_entry(container_id, None) {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        ips
    }

    /// Whether some attachment cannot be indexed and therefore needs a scan to be found.
    pub fn can_index(container_id: &str, ifname: &str) -> bool {
        entry_name(container_id, Some(ifname)).is_some()
    }

    /// The fingerprint of what foreign writers change (see the module documentation).
    fn fingerprint(&self, range_sets: usize) -> String {
        let mut out = String::from(STAMP_HEADER);
        out.push_str(&format!("boot {}\n", boot_id()));
        match fs::symlink_metadata(&self.network_dir) {
            Ok(m) => out.push_str(&format!("dir {} {}.{:09}\n", m.ino(), m.mtime(), m.mtime_nsec())),
            Err(_) => out.push_str("dir ?\n"),
        }
        for n in 0..range_sets {
            let path = self.network_dir.join(format!("{LAST_RESERVED_PREFIX}{n}"));
            // One no-follow open, then the open file's metadata: a link in the hint's
            // place is never read through (it reads as absent).
            // The hint is one address: read at most 64 bytes (and, through `take`, without
            // the size probe a plain read_to_end of a file makes).
            let read = cni_os::fs::open_nofollow(&path).and_then(|mut file| {
                let meta = file.metadata()?;
                let mut content = Vec::with_capacity(64);
                std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, 64), &mut content)?;
                Ok((meta, content))
            });
            match read {
                Ok((m, content)) => out.push_str(&format!(
                    "last {n} {} {}.{:09} {} {}\n",
                    m.ino(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.len(),
                    String::from_utf8_lossy(&content).trim()
                )),
                _ => out.push_str(&format!("last {n} absent\n")),
            }
        }
        out
    }

    /// Whether the index is known to list every allocation of the directory: the stamp
    /// matches and the table, if there is one, is readable (a damaged table with a valid
    /// stamp would otherwise be replaced by an empty one, forgetting every attachment).
    /// The table opened here serves the operation's lookups.
    pub fn is_complete(&self, range_sets: usize) -> bool {
        match cni_os::fs::read_nofollow(&self.dir.join(STAMP_FILE)) {
            Ok(Some(stamp)) if stamp == self.fingerprint(range_sets).as_bytes() => {}
            _ => return false,
        }
        let path = self.table_path();
        match SlotTable::open(&path) {
            Ok(Some(table)) => {
                *self.table.borrow_mut() = Some(table);
                true
            }
            Ok(None) => fs::symlink_metadata(&path).is_err(),
            Err(_) => false,
        }
    }

    /// Removes the whole index directory, whatever it contains, so that a rebuild starts
    /// from nothing.
    pub fn discard(&self) -> Result<(), HostLocalError> {
        self.table.borrow_mut().take();
        match fs::remove_dir_all(&self.dir).ignore_missing() {
            // A file where the directory should be.
            Err(e) => fs::remove_file(&self.dir)
                .map_err(|_| HostLocalError::io(&self.dir, "discarding the damaged index", e)),
            Ok(_) => Ok(()),
        }
    }

    /// Forgets completeness: called before modifying anything, so that an operation that
    /// stops half-way forces the next one to rebuild.
    pub fn invalidate(&self) -> Result<(), HostLocalError> {
        let path = self.dir.join(STAMP_FILE);
        // Any byte but the header's first makes the stamp differ from every fingerprint.
        let spoil = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut stamp| stamp.write_all(b"-"));
        // A link in the stamp's place is removed, never written through: no stamp means
        // incomplete too.
        let spoil = match spoil {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => fs::remove_file(&path),
            other => other,
        };
        spoil
            .ignore_missing()
            .map(drop)
            .map_err(|e| HostLocalError::io(&path, "invalidating the index stamp", e))
    }

    /// Declares the index complete for the directory as it is now.
    pub fn mark_complete(&self, range_sets: usize) -> Result<(), HostLocalError> {
        self.write_stamp(&self.fingerprint(range_sets))
    }

    /// Makes the index list exactly the given allocations (from a scan): a fresh table,
    /// and nothing else in the index directory but the stamp (files of the v1 layout go,
    /// and a `table.new` a writer killed before its rename left behind: under the lock
    /// every writer holds, no other is in flight; a directory in its place goes too, the
    /// whole index directory being ours).
    pub fn rebuild(&self, allocations: &[(IpAddr, Option<Holder>)]) -> Result<(), HostLocalError> {
        self.invalidate()?;
        let mut wanted: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for (ip, holder) in allocations {
            let Some(holder) = holder else { continue };
            if let Some(key) = entry_name(&holder.container_id, holder.ifname.as_deref()) {
                wanted.entry(key).or_default().push(*ip);
            }
        }
        self.create_table(&wanted)?;
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                if !matches!(entry.file_name().to_str(), Some(STAMP_FILE | TABLE_FILE)) {
                    let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                    let _ =
                        if is_dir { fs::remove_dir_all(entry.path()) } else { fs::remove_file(entry.path()) };
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_unambiguous_and_safe() {
        assert_eq!(entry_name("a.b", Some("c")).unwrap(), "a.b:c");
        assert_eq!(entry_name("a", Some("b.c")).unwrap(), "a:b.c");
        assert_eq!(entry_name("ctr", None).unwrap(), "ctr:");
        assert_eq!(entry_name("", Some("x")), None);
        assert_eq!(entry_name("a b", Some("x")), None);
        assert!(entry_name(&"x".repeat(64), Some("eth0")).is_some());
        assert_eq!(entry_name(&"x".repeat(200), Some("eth0")), None);
    }

    /// An index of network `n` under `dir` listing ctr1/eth0 at 10.0.0.2.
    fn index_holding_ctr1(dir: &std::path::Path) -> (Index, IpAddr) {
        let index = Index::new(&Store::open(dir, "n").unwrap());
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        index.add("ctr1", "eth0", ip).unwrap();
        (index, ip)
    }

    #[test]
    fn rebuild_removes_a_killed_writers_table_new_file_or_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let (index, ip) = index_holding_ctr1(tmp.path());
        let leftover = tmp.path().join("n").join(INDEX_DIR).join("table.new");
        for directory in [false, true] {
            if directory {
                fs::create_dir_all(leftover.join("x")).unwrap();
            } else {
                fs::write(&leftover, b"half a tab").unwrap();
            }
            let holder = Holder { container_id: "ctr1".into(), ifname: Some("eth0".into()) };
            index.rebuild(&[(ip, Some(holder))]).unwrap();
            assert!(!leftover.exists(), "directory: {directory}");
            assert_eq!(index.candidates("ctr1", "eth0"), vec![ip]);
        }
    }

    #[test]
    fn index_content_never_matches_go_holder_comparison() {
        let tmp = tempfile::tempdir().unwrap();
        let (index, ip) = index_holding_ctr1(tmp.path());
        index.mark_complete(1).unwrap();
        for entry in fs::read_dir(tmp.path().join("n").join(INDEX_DIR)).unwrap() {
            let content = fs::read(entry.unwrap().path()).unwrap();
            // Go compares trimmed content with "<id>\r\n<ifname>" or "<id>".
            assert_eq!(Holder::parse(&content), None);
        }
        assert_eq!(index.candidates("ctr1", "eth0"), vec![ip]);
        assert!(index.is_complete(1));
        // A foreign reservation changes the directory: the index is no longer complete.
        fs::write(tmp.path().join("n/10.0.0.3"), "ctr2\r\neth0").unwrap();
        fs::write(tmp.path().join("n/last_reserved_ip.0"), "10.0.0.3").unwrap();
        assert!(!index.is_complete(1));
    }
}
