//! Temporary files of atomic writes: their names, their locked creation, and the removal
//! of those whose writer is gone.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{create_exclusive, open_nofollow_nonblocking};

use rustix::fs::OFlags;

/// The temporary file a write of `path` goes through: `.<file name>.tmp.<pid>` beside it.
/// Hidden (a directory listing that looks for records by suffix never takes it for one),
/// named after the whole file name (a container ID may contain dots, so cutting at an
/// extension could make two records share one), and carrying the writer's pid so that two
/// processes writing one record never share a temporary file.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp.{}", std::process::id()))
}

/// The pid of the writer, when `name` is a temporary file name made by [`temp_path`].
pub fn temp_writer(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (_, pid) = rest.rsplit_once(".tmp.")?;
    pid.parse().ok()
}

/// Removes the temporary files in `dir` whose writer is gone (killed between creating the
/// file and renaming it into place); returns the paths removed.
///
/// A writer holds an exclusive `flock` on its temporary file from before the file has a
/// name (it is made unnamed with `O_TMPFILE`, locked, then linked in) until after the
/// rename, and the kernel drops the lock when the writer dies. So a temporary file whose
/// lock can be taken has no writer, whatever its age, whatever pid namespace the writer
/// ran in and whether its pid is in use again; a file being written right now is never
/// taken. The lock is held while the name is checked to still be that file and removed,
/// so a new write that took the name meanwhile is left alone.
pub fn remove_abandoned_temp_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if temp_writer(&entry.file_name().to_string_lossy()).is_none() {
            continue;
        }
        let path = entry.path();
        if remove_if_abandoned(&path)? {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Removes the temporary file `path` when no writer holds its lock: `Ok(true)` if removed.
fn remove_if_abandoned(path: &Path) -> io::Result<bool> {
    let file = match open_nofollow_nonblocking(path) {
        Ok(file) => file,
        // Renamed into place or removed meanwhile; a link or a FIFO is nobody's write.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => return Ok(false),
        Err(e) => return Err(e),
    };
    let held = file.metadata()?;
    if !held.is_file() || !crate::lock::try_exclusive(&file)? {
        return Ok(false);
    }
    match std::fs::symlink_metadata(path) {
        Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {}
        _ => return Ok(false),
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates `temp` for writing, locked before it has a name: made unnamed in its directory
/// (`O_TMPFILE`), locked, then linked in under `temp`, which must be free. Where the file
/// system has no unnamed files (or `/proc` is not mounted), it is created by name and
/// locked at once: a cleaner running in between would take it for abandoned, and the
/// write would then fail at its rename rather than leave anything behind.
pub(super) fn create_locked_temp(temp: &Path, mode: u32) -> io::Result<File> {
    let dir = temp.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let unnamed = rustix::fs::open(
        dir,
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(mode),
    );
    if let Ok(fd) = unnamed {
        let file = File::from(fd);
        crate::lock::exclusive(&file)?;
        let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
        let linked = rustix::fs::linkat(
            rustix::fs::CWD,
            &proc_path,
            rustix::fs::CWD,
            temp,
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        );
        match linked {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::EXIST) => return Err(io::Error::from(rustix::io::Errno::EXIST)),
            // No /proc: fall back to a named creation below.
            Err(_) => {}
        }
    }
    let file = create_exclusive(temp, mode)?;
    crate::lock::exclusive(&file)?;
    Ok(file)
}
