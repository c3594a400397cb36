//! The attachment index's storage: one file of fixed-size slots, an open-addressing hash
//! table from attachment key (`<containerID>:<ifname>`) to the addresses it holds.
//!
//! One file for every attachment means ADD and DEL update the index with in-place writes
//! of a 256-byte slot and never create or remove a file: on ext4 without a journal,
//! creating a file in a directory with many recently freed inodes cost 0.1–0.7 ms.
//!
//! ```text
//! slot 0        "cni-rs host-local index table v1 <capacity> <used>\n", space padded
//! slot 1..=cap  all zero (never used: the end of a probe chain), "-" (freed: probing goes
//!               on past it), or "<key> <ip> [<ip> ...]\n" zero padded
//! ```
//! A key hashes to its first slot; collisions probe the following slots. `used` counts
//! slots that are not all zero; above half the capacity the table is rewritten twice as
//! large, without the freed slots. Unused slots are holes: the file takes disk space only
//! for slots ever written.

use cni_os::Idempotent;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

const SLOT: usize = 256;
const HEADER: &str = "cni-rs host-local index table v1";
const MIN_CAPACITY: u64 = 64;
const FREED: u8 = b'-';

/// An open table.
pub struct SlotTable {
    file: File,
    capacity: u64,
    used: u64,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("index table: {what}"))
}

/// FNV-1a: stable across processes and versions, which the on-disk layout needs.
fn hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Whether an entry for `key` with addresses `ips` fits one slot.
pub fn fits(key: &str, ips: &[IpAddr]) -> bool {
    encode(key, ips).is_some()
}

fn encode(key: &str, ips: &[IpAddr]) -> Option<[u8; SLOT]> {
    let mut line = key.to_string();
    for ip in ips {
        line.push(' ');
        line.push_str(&ip.to_string());
    }
    line.push('\n');
    let mut slot = [0u8; SLOT];
    (line.len() <= SLOT && !key.is_empty() && !key.contains(char::is_whitespace)).then(|| {
        slot[..line.len()].copy_from_slice(line.as_bytes());
        slot
    })
}

/// What probing for a key found: its slot and addresses, and the first slot on its chain
/// that a new entry could take.
struct Probe {
    found: Option<(u64, Vec<IpAddr>)>,
    reusable: Option<u64>,
}

enum Slot {
    Empty,
    Freed,
    Entry { key: String, ips: Vec<IpAddr> },
}

fn decode(slot: &[u8]) -> Slot {
    match slot.first() {
        None | Some(0) => Slot::Empty,
        Some(&FREED) => Slot::Freed,
        _ => {
            let text = String::from_utf8_lossy(slot);
            let line = text.split('\n').next().unwrap_or("");
            let mut words = line.split(' ');
            let key = words.next().unwrap_or("").to_string();
            Slot::Entry { key, ips: words.filter_map(|w| w.parse().ok()).collect() }
        }
    }
}

fn header(capacity: u64, used: u64) -> [u8; SLOT] {
    let mut slot = [b' '; SLOT];
    let text = format!("{HEADER} {capacity} {used}");
    slot[..text.len()].copy_from_slice(text.as_bytes());
    slot[SLOT - 1] = b'\n';
    slot
}

impl SlotTable {
    /// Opens the table at `path`; `None` if there is none or it is not one.
    pub fn open(path: &Path) -> io::Result<Option<SlotTable>> {
        // Never through a link: an error, after which the index is rebuilt and the rebuild's
        // rename replaces the link.
        let opened = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path);
        let Some(mut file) = opened.ignore_missing()? else {
            return Ok(None);
        };
        let mut first = [0u8; SLOT];
        if file.read_exact(&mut first).is_err() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&first);
        let numbers: Vec<u64> = text
            .strip_prefix(HEADER)
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        Ok(match numbers[..] {
            [capacity, used] if capacity >= MIN_CAPACITY && used <= capacity => {
                Some(SlotTable { file, capacity, used })
            }
            _ => None,
        })
    }

    /// Writes a new table holding `entries` at `path` (a temporary file renamed over it),
    /// with room to grow.
    pub fn create(path: &Path, entries: &BTreeMap<String, Vec<IpAddr>>) -> io::Result<SlotTable> {
        let capacity = (entries.len() as u64 * 4).next_power_of_two().max(MIN_CAPACITY);
        let mut slots = vec![0u8; SLOT * (capacity as usize + 1)];
        for (key, ips) in entries {
            let encoded = encode(key, ips).ok_or_else(|| invalid("entry does not fit a slot"))?;
            let mut bucket = 1 + hash(key) % capacity;
            while slots[bucket as usize * SLOT] != 0 {
                bucket = 1 + bucket % capacity;
            }
            slots[bucket as usize * SLOT..][..SLOT].copy_from_slice(&encoded);
        }
        slots[..SLOT].copy_from_slice(&header(capacity, entries.len() as u64));
        let temp = path.with_extension("new");
        // Writers hold the network's lock, so a `table.new` already there was left by
        // one that was killed; a directory in its place would block every rewrite.
        if temp.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&temp)?;
        }
        // A link in `table.new`'s place fails the open (and is removed below), never
        // followed.
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .and_then(|mut f| f.write_all(&slots))
            .and_then(|()| std::fs::rename(&temp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        SlotTable::open(path)?.ok_or_else(|| invalid("a table just written does not read back"))
    }

    fn read_slot(&self, bucket: u64) -> io::Result<[u8; SLOT]> {
        let mut slot = [0u8; SLOT];
        // Past the end of the file (a table cut short) reads as empty slots.
        let n = self.file.read_at(&mut slot, bucket * SLOT as u64)?;
        slot[n..].fill(0);
        Ok(slot)
    }

    /// Where `key` is on its probe chain, or where it could go.
    fn find(&self, key: &str) -> io::Result<Probe> {
        let start = hash(key) % self.capacity;
        let mut reusable = None;
        for step in 0..self.capacity {
            let bucket = 1 + (start + step) % self.capacity;
            match decode(&self.read_slot(bucket)?) {
                Slot::Empty => return Ok(Probe { found: None, reusable: reusable.or(Some(bucket)) }),
                Slot::Freed => reusable = reusable.or(Some(bucket)),
                Slot::Entry { key: k, ips } if k == key => {
                    return Ok(Probe { found: Some((bucket, ips)), reusable })
                }
                Slot::Entry { .. } => {}
            }
        }
        Ok(Probe { found: None, reusable })
    }

    /// The addresses recorded for `key`.
    pub fn get(&self, key: &str) -> io::Result<Vec<IpAddr>> {
        Ok(self.find(key)?.found.map(|(_, ips)| ips).unwrap_or_default())
    }

    /// Records `ips` for `key` (none: forgets the key). Grows the table when needed.
    pub fn set(mut self, path: &Path, key: &str, ips: &[IpAddr]) -> io::Result<()> {
        let Probe { found, reusable } = self.find(key)?;
        let target = match (found, ips.is_empty()) {
            (Some((bucket, _)), true) => return self.file.write_all_at(&[FREED], bucket * SLOT as u64),
            (None, true) => return Ok(()),
            (Some((bucket, _)), false) => bucket,
            (None, false) => match reusable {
                Some(bucket) if (self.used + 1) * 2 <= self.capacity => {
                    if self.read_slot(bucket)?[0] == 0 {
                        self.used += 1;
                        self.file.write_all_at(&header(self.capacity, self.used), 0)?;
                    }
                    bucket
                }
                _ => {
                    let mut entries = self.entries()?;
                    entries.insert(key.to_string(), ips.to_vec());
                    return SlotTable::create(path, &entries).map(drop);
                }
            },
        };
        let encoded = encode(key, ips).ok_or_else(|| invalid("entry does not fit a slot"))?;
        self.file.write_all_at(&encoded, target * SLOT as u64)
    }

    /// Every entry, read in one go.
    pub fn entries(&self) -> io::Result<BTreeMap<String, Vec<IpAddr>>> {
        let mut all = vec![0u8; SLOT * self.capacity as usize];
        let mut filled = 0;
        while filled < all.len() {
            match self.file.read_at(&mut all[filled..], (SLOT + filled) as u64)? {
                0 => break,
                n => filled += n,
            }
        }
        Ok(all[..filled]
            .chunks(SLOT)
            .filter_map(|slot| match decode(slot) {
                Slot::Entry { key, ips } if !ips.is_empty() => Some((key, ips)),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn set_get_forget_and_grow_past_collisions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("table");
        SlotTable::create(&path, &BTreeMap::new()).unwrap();
        let table = || SlotTable::open(&path).unwrap().unwrap();
        // Enough keys to collide and to force two growths (64 -> 128 -> 256 slots).
        for n in 0..100u32 {
            let key = format!("ctr{n}:eth0");
            table().set(&path, &key, &[ip(&format!("10.0.{}.{}", n / 200, n % 200 + 2))]).unwrap();
        }
        assert!(table().capacity >= 256, "{}", table().capacity);
        for n in 0..100u32 {
            assert_eq!(table().get(&format!("ctr{n}:eth0")).unwrap(), [ip(&format!("10.0.0.{}", n + 2))]);
        }
        // Forgetting leaves a freed slot that later probes walk past.
        for n in (0..100u32).step_by(2) {
            table().set(&path, &format!("ctr{n}:eth0"), &[]).unwrap();
        }
        for n in 0..100u32 {
            let expected: Vec<IpAddr> =
                if n % 2 == 0 { vec![] } else { vec![ip(&format!("10.0.0.{}", n + 2))] };
            assert_eq!(table().get(&format!("ctr{n}:eth0")).unwrap(), expected, "ctr{n}");
        }
        // Updating in place, dual stack.
        table().set(&path, "ctr1:eth0", &[ip("10.0.0.3"), ip("fd00::3")]).unwrap();
        assert_eq!(table().get("ctr1:eth0").unwrap(), [ip("10.0.0.3"), ip("fd00::3")]);
        assert_eq!(table().entries().unwrap().len(), 50);
    }

    #[test]
    fn foreign_or_damaged_files_are_not_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("table");
        assert!(SlotTable::open(&path).unwrap().is_none());
        std::fs::write(&path, "ctr1\r\neth0").unwrap();
        assert!(SlotTable::open(&path).unwrap().is_none());
        std::fs::write(&path, format!("{HEADER} 12 3")).unwrap();
        assert!(SlotTable::open(&path).unwrap().is_none());
    }

    #[test]
    fn oversized_or_spaced_keys_do_not_fit() {
        assert!(fits("ctr:eth0", &[ip("10.0.0.2")]));
        assert!(!fits(&"x".repeat(300), &[ip("10.0.0.2")]));
        assert!(!fits("a b:eth0", &[ip("10.0.0.2")]));
        assert!(!fits("", &[ip("10.0.0.2")]));
    }
}
