//! A per-attachment index, so that "which addresses does (containerID, ifname) hold?" does
//! not read every address file of the network (the Go reference walks the whole directory
//! on every ADD and DEL, which makes both O(allocations)).
//!
//! # Layout
//! ```text
//! <dataDir>/<network>/.cni-rs-index/
//!     <containerID>:<ifname>     "cni-rs host-local attachment index v1\n<ip>\n<ip>\n"
//!     <containerID>:             same, for legacy files that record only the container ID
//!     stamp                      fingerprint of the directory when the index was last
//!                                known to be complete (see below)
//! ```
//! `:` appears in neither container IDs nor interface names, so names cannot collide.
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

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::error::HostLocalError;
use super::store::{read_small, rewrite_in_place, Holder, Store, LAST_RESERVED_PREFIX};

pub const INDEX_DIR: &str = ".cni-rs-index";
const STAMP_FILE: &str = "stamp";
const ENTRY_HEADER: &str = "cni-rs host-local attachment index v1\n";
const STAMP_HEADER: &str = "cni-rs host-local index stamp v1\n";

/// The attachment index of one locked network directory.
pub struct Index<'a> {
    store: &'a Store,
    dir: PathBuf,
}

fn index_io<'p>(path: &'p Path, context: &'static str) -> impl FnOnce(io::Error) -> HostLocalError + 'p {
    move |e| HostLocalError::io(path, context, e)
}

/// The index entry name of an attachment (`ifname: None` for legacy holders), or `None` if
/// it cannot be a file name; such attachments are found by scanning.
fn entry_name(container_id: &str, ifname: Option<&str>) -> Option<String> {
    let name = format!("{}:{}", container_id.trim(), ifname.unwrap_or(""));
    let bad = |s: &str| s.contains('/') || s.contains('\0') || s.contains(char::is_whitespace);
    let ok = !container_id.trim().is_empty()
        && !container_id.trim().starts_with('.')
        && !bad(&name)
        && name.len() <= 255;
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

impl<'a> Index<'a> {
    pub fn new(store: &'a Store) -> Index<'a> {
        Index { store, dir: store.dir().join(INDEX_DIR) }
    }

    /// Writes an index file, creating the index directory on first use.
    fn write_file(&self, path: &Path, content: &str, context: &'static str) -> Result<(), HostLocalError> {
        let mut result = rewrite_in_place(path, content.as_bytes());
        if matches!(&result, Err(e) if e.kind() == io::ErrorKind::NotFound) {
            match fs::create_dir(&self.dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(HostLocalError::io(&self.dir, "creating the index directory", e))
                }
                _ => result = rewrite_in_place(path, content.as_bytes()),
            }
        }
        result.map_err(index_io(path, context))
    }

    /// Addresses the index lists for an attachment (unverified).
    fn read_entry(&self, container_id: &str, ifname: Option<&str>) -> Vec<IpAddr> {
        let Some(name) = entry_name(container_id, ifname) else {
            return Vec::new();
        };
        let Ok(content) = read_small(&self.dir.join(name)) else {
            return Vec::new();
        };
        let content = String::from_utf8_lossy(&content);
        content
            .strip_prefix(ENTRY_HEADER)
            .unwrap_or("")
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn write_entry(
        &self,
        container_id: &str,
        ifname: Option<&str>,
        ips: &[IpAddr],
    ) -> Result<(), HostLocalError> {
        let Some(name) = entry_name(container_id, ifname) else {
            return Ok(());
        };
        let path = self.dir.join(name);
        if ips.is_empty() {
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(HostLocalError::io(&path, "removing an index entry", e))
                }
                _ => Ok(()),
            };
        }
        let mut content = String::from(ENTRY_HEADER);
        for ip in ips {
            content.push_str(&ip.to_string());
            content.push('\n');
        }
        self.write_file(&path, &content, "writing an index entry")
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
        match fs::metadata(self.store.dir()) {
            Ok(m) => out.push_str(&format!("dir {} {}.{:09}\n", m.ino(), m.mtime(), m.mtime_nsec())),
            Err(_) => out.push_str("dir ?\n"),
        }
        for n in 0..range_sets {
            let path = self.store.dir().join(format!("{LAST_RESERVED_PREFIX}{n}"));
            match (fs::metadata(&path), fs::read(&path)) {
                (Ok(m), Ok(content)) => out.push_str(&format!(
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

    /// Whether the index is known to list every allocation of the directory.
    pub fn is_complete(&self, range_sets: usize) -> bool {
        match fs::read_to_string(self.dir.join(STAMP_FILE)) {
            Ok(stamp) => stamp == self.fingerprint(range_sets),
            Err(_) => false,
        }
    }

    /// Forgets completeness: called before modifying anything, so that an operation that
    /// stops half-way forces the next one to rebuild.
    pub fn invalidate(&self) -> Result<(), HostLocalError> {
        let path = self.dir.join(STAMP_FILE);
        // Any byte but the header's first makes the stamp differ from every fingerprint.
        let spoil = OpenOptions::new().write(true).open(&path).and_then(|mut stamp| stamp.write_all(b"-"));
        match spoil {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(HostLocalError::io(&path, "invalidating the index stamp", e))
            }
            _ => Ok(()),
        }
    }

    /// Declares the index complete for the directory as it is now.
    pub fn mark_complete(&self, range_sets: usize) -> Result<(), HostLocalError> {
        let path = self.dir.join(STAMP_FILE);
        self.write_file(&path, &self.fingerprint(range_sets), "writing the index stamp")
    }

    /// Makes the index list exactly the given allocations (from a scan). Entries that are
    /// already right are only read, not rewritten, so that catching up after a foreign
    /// writer costs reads, plus writes only for what changed.
    pub fn rebuild(&self, allocations: &[(IpAddr, Option<Holder>)]) -> Result<(), HostLocalError> {
        self.invalidate()?;
        let mut wanted: HashMap<String, (&Holder, Vec<IpAddr>)> = HashMap::new();
        for (ip, holder) in allocations {
            let Some(holder) = holder else { continue };
            let Some(name) = entry_name(&holder.container_id, holder.ifname.as_deref()) else {
                continue;
            };
            wanted.entry(name).or_insert_with(|| (holder, Vec::new())).1.push(*ip);
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name != STAMP_FILE && !wanted.contains_key(name.as_ref()) {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        for (holder, mut ips) in wanted.into_values() {
            let mut listed = self.read_entry(&holder.container_id, holder.ifname.as_deref());
            listed.sort();
            ips.sort();
            if listed != ips {
                self.write_entry(&holder.container_id, holder.ifname.as_deref(), &ips)?;
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
        assert_eq!(entry_name("..", Some("x")), None);
        assert_eq!(entry_name("a/b", Some("x")), None);
        assert_eq!(entry_name(&"x".repeat(300), Some("eth0")), None);
    }

    #[test]
    fn index_content_never_matches_go_holder_comparison() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), "n").unwrap();
        let index = Index::new(&store);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        index.add("ctr1", "eth0", ip).unwrap();
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
