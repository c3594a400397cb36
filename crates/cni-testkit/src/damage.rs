//! Damaging a state file the ways a crash, a full disk or a careless hand do, for the
//! damaged-state suites: DEL and GC must get past each.

use std::fs;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Zero bytes long.
    Empty,
    /// The first half of its content only.
    CutShort,
    /// Bytes that are no text, let alone JSON.
    Garbage,
    /// An empty directory where the file was.
    Directory,
}

impl Damage {
    pub const ALL: [Damage; 4] = [Damage::Empty, Damage::CutShort, Damage::Garbage, Damage::Directory];

    /// Damages the file at `path` in place. Rewriting its content (the first three kinds)
    /// leaves the directory around it untouched, as a crash would.
    pub fn apply(self, path: &Path) {
        let content = fs::read(path).unwrap_or_default();
        match self {
            Damage::Empty => fs::write(path, b"").unwrap(),
            Damage::CutShort => fs::write(path, &content[..content.len() / 2]).unwrap(),
            Damage::Garbage => fs::write(path, [0xff, 0xfe, 0x00, b'\r', b'\n', 0x80, b' ', b'x']).unwrap(),
            Damage::Directory => {
                let _ = fs::remove_file(path);
                fs::create_dir(path).unwrap();
            }
        }
    }
}
