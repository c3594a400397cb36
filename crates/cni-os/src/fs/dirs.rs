//! Private directories: made 0700 and ours, or refused when another user could swap what
//! is in them.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Makes sure `dir` is a private directory of this user: created 0700 when absent (its
/// missing parents with the usual 0755), and when present a real directory (not a link)
/// owned by this process's user, tightened to 0700 if it was wider (an older install's
/// 0755 tree). One owned by another user is refused: whoever owns it could swap its
/// contents under us.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        // 0755 asked for explicitly: `create_dir_all` would take 0777 less the umask, and
        // under umask 000 a world-writable parent would let any user move our private
        // directory aside and put one of theirs in its place.
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = require_own_dir(dir)?;
    if meta.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Checks that `dir` is a real directory (not a link to one) owned by this process's user,
/// and returns its metadata; an error naming the path and the owner otherwise.
pub fn require_own_dir(dir: &Path) -> io::Result<std::fs::Metadata> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory (a link or a file is in its place)", dir.display()),
        ));
    }
    let me = crate::effective_uid();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is owned by uid {}, not by uid {me}: refusing to use it", dir.display(), meta.uid()),
        ));
    }
    Ok(meta)
}

/// Checks that `dir` is a real directory owned by this process's user (as
/// [`require_own_dir`]) that nobody else may write into: no write bit for group or others.
/// A directory others can write into lets them plant links and files where we read and
/// write, or take names we are about to create; it is refused with an error naming it and
/// its mode.
pub fn require_exclusive_dir(dir: &Path) -> io::Result<std::fs::Metadata> {
    let meta = require_own_dir(dir)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is writable by group or others (mode {mode:04o}): refusing to use it", dir.display()),
        ));
    }
    Ok(meta)
}

/// Checks that no other user can rename, remove or replace what `dir` holds: it is owned
/// by root or by this process's user, and writable by group or others only with the sticky
/// bit (as `/tmp`, where only an entry's owner may rename it). An exclusive directory
/// ([`require_exclusive_dir`]) inside a parent others could write into could be swapped,
/// between the check and its use, for one of theirs or for a link. Links to `dir` are
/// followed (the check is about the directory it names).
pub fn require_no_foreign_renames(dir: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(dir)?;
    let me = crate::effective_uid();
    let mode = meta.mode() & 0o7777;
    let why = if meta.uid() != 0 && meta.uid() != me {
        format!("is owned by uid {}", meta.uid())
    } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        format!("is writable by group or others without the sticky bit (mode {mode:04o})")
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} {why}: another user could swap what it holds; refusing to use it", dir.display()),
    ))
}

/// What [`clear_dir_in_place`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleared {
    /// No directory there (nothing, a file, a link; or another process cleared it first).
    Nothing,
    /// An empty directory was removed.
    RemovedEmpty,
    /// A directory with content was renamed to this path, beside it.
    MovedAside(PathBuf),
}

/// Clears a directory that stands where one of our state files belongs (a careless hand, a
/// botched restore), so the file can be made again. An empty directory is removed; one with
/// content is renamed aside to `.<name>.damaged.<n>` in the same directory, never deleted:
/// nothing in it is lost, and nothing is deleted on the word of whoever put it there.
/// The rename never replaces anything. Meant for directories the caller owns exclusively
/// ([`require_exclusive_dir`]). Concurrent callers are fine: the loser finds nothing.
pub fn clear_dir_in_place(path: &Path) -> io::Result<Cleared> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(Cleared::Nothing),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Cleared::Nothing),
        Err(e) => return Err(e),
    }
    match std::fs::remove_dir(path) {
        Ok(()) => return Ok(Cleared::RemovedEmpty),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Cleared::Nothing),
        // Some file systems answer EEXIST rather than ENOTEMPTY for a non-empty directory.
        Err(e)
            if e.kind() == io::ErrorKind::DirectoryNotEmpty
                || e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    // A bounded search for a free name: each earlier repair of the same name took one.
    for n in 0..1000 {
        let aside = path.with_file_name(format!(".{name}.damaged.{n}"));
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            path,
            rustix::fs::CWD,
            &aside,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => return Ok(Cleared::MovedAside(aside)),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(rustix::io::Errno::NOENT) => return Ok(Cleared::Nothing),
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}: no free name to move it aside (1000 earlier repairs are still there)", path.display()),
    ))
}
