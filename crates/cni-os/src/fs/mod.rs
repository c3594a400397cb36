//! State files and directories: atomic writes, no link following, private directories.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// Whether a write must reach the disk before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file before the rename: for state that must survive a power loss (leases
    /// on disk, allocation records in a persistent directory).
    Synced,
    /// No fsync: for state describing things that do not survive a reboot either (records
    /// of interfaces, normally on a tmpfs under /run). A crash still never leaves half a
    /// file: the rename is atomic.
    Unsynced,
}

mod dirs;
mod temp;
#[cfg(test)]
mod tests;

pub use dirs::*;
use temp::create_locked_temp;
pub use temp::{remove_abandoned_temp_files, temp_path, temp_writer};

/// Writes `bytes` to `path` atomically with permission bits `mode` (applied at creation,
/// so the content is never readable under a wider mode, whatever the umask).
///
/// The temporary file is locked for as long as it has a name (see
/// [`remove_abandoned_temp_files`]) and linked in only under a free name, never through a
/// link: a link planted under its name by another user makes the write fail instead of
/// writing through it. A leftover of an earlier writer with the same pid is removed first
/// (unlinking never follows a link). The parent directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    let temp = temp_path(path);
    match std::fs::remove_file(&temp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = create_locked_temp(&temp, mode).and_then(|mut file| {
        file.write_all(bytes)?;
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        // The mode given at creation is cut by the umask; set it exactly.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        // Renamed before the file (and so its lock) is closed: a cleaner that can take the
        // lock finds the name gone or another file's.
        std::fs::rename(&temp, path)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Creates a new file for writing: fails if anything (a file, a link) has its name.
pub fn create_exclusive(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(nofollow_flags()).open(path)
}

/// Opens an existing file for reading; a link in its place is an error (`ELOOP`), so a
/// link another user planted never makes us read (or later write) what it points at.
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(nofollow_flags()).open(path)
}

/// Opens (creating if absent, mode `mode`) a file for reading and writing without
/// following a link: for files updated in place under a lock, such as a lock file itself.
pub fn open_rw_nofollow(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(nofollow_flags())
        .open(path)
}

/// Reads a whole file without following a link. `Ok(None)` when there is none.
pub fn read_nofollow(path: &Path) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = match open_nofollow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Reads a whole regular file without following a link, refusing one longer than `limit`
/// bytes (`InvalidData`, naming the file and the limit) after reading at most `limit + 1`:
/// for state another user may have planted, which must not make us read without end. A
/// FIFO, device or socket in the file's place is refused (`InvalidInput`) without blocking:
/// the open does not wait for a FIFO's writer. `Ok(None)` when there is none.
pub fn read_nofollow_limited(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    match open_nofollow_nonblocking(path) {
        Ok(file) => read_opened_limited(file, path, limit).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads a whole regular file, following links (a configuration directory may link its
/// files from elsewhere), under the same bounds as [`read_nofollow_limited`]: whatever the
/// link or name leads to must be a regular file (a FIFO, `/dev/zero` or a socket is refused
/// without blocking on it) of at most `limit` bytes, of which at most `limit + 1` are read.
/// For input from files anyone who can write the directory may have put there.
pub fn read_regular_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::CLOEXEC | OFlags::NONBLOCK).bits() as i32)
        .open(path)?;
    read_opened_limited(file, path, limit)
}

/// The bounded read both of the above share, on a file opened without blocking: what the
/// open reached is checked (not the name, which may have changed since a listing).
fn read_opened_limited(file: File, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() && !file_type.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is longer than {limit} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// Opens `path` for reading without following a link and without waiting for a FIFO's
/// writer: the open every read of state someone else may have planted goes through.
pub(super) fn open_nofollow_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(nofollow_flags() | OFlags::NONBLOCK.bits() as i32).open(path)
}

fn nofollow_flags() -> i32 {
    (OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32
}
