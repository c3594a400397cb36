//! State files and directories: atomic writes, no link following, private directories.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Creates `temp` for writing, locked before it has a name: made unnamed in its directory
/// (`O_TMPFILE`), locked, then linked in under `temp`, which must be free. Where the file
/// system has no unnamed files (or `/proc` is not mounted), it is created by name and
/// locked at once: a cleaner running in between would take it for abandoned, and the
/// write would then fail at its rename rather than leave anything behind.
fn create_locked_temp(temp: &Path, mode: u32) -> io::Result<File> {
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
fn open_nofollow_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(nofollow_flags() | OFlags::NONBLOCK.bits() as i32).open(path)
}

fn nofollow_flags() -> i32 {
    (OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_write_replaces_the_file_whole_with_the_mode_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        std::fs::write(&path, "old").unwrap();
        write_atomic(&path, b"new", 0o600, Durability::Synced).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(mode_of(&path), 0o600);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("record.json")], "no temporary file stays");
    }

    #[test]
    fn a_link_planted_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("record");
        // Exclusive creation would refuse a planted link; the write removes the link
        // first (it cannot be our own file: our pid is alive) and never writes through it.
        symlink(&victim, temp_path(&path)).unwrap();
        write_atomic(&path, b"state", 0o600, Durability::Unsynced).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"state");
        assert!(!std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
    }

    #[test]
    fn a_link_at_the_target_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("record");
        symlink(&victim, &path).unwrap();
        write_atomic(&path, b"state", 0o644, Durability::Unsynced).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"state");
    }

    #[test]
    fn exclusive_creation_refuses_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("new");
        symlink(&victim, &path).unwrap();
        let err = create_exclusive(&path, 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn reading_through_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "x").unwrap();
        let link = dir.path().join("link");
        symlink(&target, &link).unwrap();
        assert_eq!(read_nofollow(&target).unwrap().unwrap(), b"x");
        assert!(read_nofollow(&link).is_err(), "a link is never followed");
        assert_eq!(read_nofollow(&dir.path().join("absent")).unwrap(), None);
        assert!(open_rw_nofollow(&link, 0o600).is_err());
    }

    #[test]
    fn a_limited_read_stops_one_byte_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record");
        std::fs::write(&path, [b'x'; 10]).unwrap();
        assert_eq!(read_nofollow_limited(&path, 10).unwrap().unwrap().len(), 10);
        let err = read_nofollow_limited(&path, 9).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("longer than 9 bytes"), "{err}");
        assert_eq!(read_nofollow_limited(&dir.path().join("absent"), 9).unwrap(), None);
        let link = dir.path().join("link");
        symlink(&path, &link).unwrap();
        assert!(read_nofollow_limited(&link, 100).is_err(), "a link is never followed");
        // A FIFO with no writer would block a plain open for ever.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let err = read_nofollow_limited(&fifo, 100).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    }

    #[test]
    fn a_regular_read_follows_links_but_only_to_a_bounded_regular_file() {
        let dir = tempfile::Builder::new().prefix("sr-fs").tempdir().unwrap();
        let path = dir.path().join("conf");
        std::fs::write(&path, [b'x'; 10]).unwrap();
        let link = dir.path().join("link");
        symlink(&path, &link).unwrap();
        assert_eq!(read_regular_limited(&link, 10).unwrap().len(), 10, "a link to a file is followed");
        // A sparse terabyte: refused after limit + 1 bytes, never allocated.
        let huge = dir.path().join("huge");
        std::fs::File::create(&huge).unwrap().set_len(1 << 40).unwrap();
        let err = read_regular_limited(&huge, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("longer than 1048576 bytes"), "{err}");
        // Endless or blocking things behind a name or a link: refused without reading.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let zero = dir.path().join("zero");
        symlink("/dev/zero", &zero).unwrap();
        for path in [&fifo, &zero] {
            let err = read_regular_limited(path, 100).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
            assert!(err.to_string().ends_with("is not a regular file"), "{err}");
        }
    }

    #[test]
    fn temp_names_carry_the_writer() {
        let path = Path::new("/state/a.b.json");
        let temp = temp_path(path);
        let name = temp.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name, format!(".a.b.json.tmp.{}", std::process::id()));
        assert_eq!(temp_writer(&name), Some(std::process::id()));
        assert_eq!(temp_writer("a.b.json"), None);
    }

    /// A writer holding its temporary file's lock, as `write_atomic` does between creating
    /// and renaming it: one process (a shell that opens the file, locks it with `flock(1)`
    /// on that descriptor, then becomes `sleep`), so once the test has killed and reaped
    /// it, nothing holds the lock any more.
    struct Writer(std::process::Child);

    impl Writer {
        fn holding(temp: &Path) -> Writer {
            std::fs::write(temp, "half a record").unwrap();
            let mut child = std::process::Command::new("sh")
                .args(["-c", "exec 9<\"$0\" && flock -x 9 && echo locked && exec sleep 600"])
                .arg(temp)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let mut line = String::new();
            io::BufRead::read_line(&mut io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
            assert_eq!(line, "locked\n", "flock(1) from util-linux took the lock");
            Writer(child)
        }

        fn kill(mut self) {
            self.0.kill().unwrap();
            self.0.wait().unwrap();
        }
    }

    #[test]
    fn a_temp_file_is_abandoned_exactly_when_no_writer_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("net-ctr-eth0");
        write_atomic(&record, b"record", 0o600, Durability::Unsynced).unwrap();
        // A live writer's file, under its own pid and under another one (a writer in
        // another pid namespace, or a pid that is in use again): both kept.
        let live = dir.path().join(".net-ctr-eth0.tmp.4194305");
        let writer = Writer::holding(&live);
        let own_pid_live = temp_path(&dir.path().join("other"));
        let own_writer = Writer::holding(&own_pid_live);
        // A killed writer's file carrying this very process's (live) pid: abandoned.
        let killed = temp_path(&dir.path().join("third"));
        Writer::holding(&killed).kill();
        assert_eq!(remove_abandoned_temp_files(dir.path()).unwrap(), vec![killed.clone()]);
        assert!(live.exists() && own_pid_live.exists() && !killed.exists() && record.exists());
        // Once their writers die, the files go at the next sweep; records never do.
        writer.kill();
        own_writer.kill();
        let mut removed = remove_abandoned_temp_files(dir.path()).unwrap();
        removed.sort();
        let mut expected = vec![live, own_pid_live];
        expected.sort();
        assert_eq!(removed, expected);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).collect();
        assert_eq!(left, vec![record]);
        assert!(remove_abandoned_temp_files(&dir.path().join("absent")).unwrap().is_empty());
    }

    #[test]
    fn a_write_in_progress_is_never_taken_for_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join(".record.tmp.1");
        let file = create_locked_temp(&temp, 0o600).unwrap();
        assert!(temp.exists());
        assert!(remove_abandoned_temp_files(dir.path()).unwrap().is_empty(), "the writer still runs");
        drop(file);
        assert_eq!(remove_abandoned_temp_files(dir.path()).unwrap(), vec![temp]);
    }

    #[test]
    fn a_private_dir_is_created_0700_and_a_wide_one_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/state");
        private_dir(&dir).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
    }

    #[test]
    fn a_link_in_a_private_dirs_place_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let dir = root.path().join("state");
        symlink(&elsewhere, &dir).unwrap();
        let err = private_dir(&dir).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn a_private_dir_owned_by_another_user_is_refused() {
        if !crate::is_root() {
            // Only root can give a directory away; as another user this case cannot arise
            // in a test. Said plainly rather than passed silently:
            panic!("this test needs root (it chowns a directory to nobody)");
        }
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let err = private_dir(&dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
    }
    #[test]
    fn an_exclusive_dir_is_ours_and_closed_to_other_writers() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("net");
        std::fs::create_dir(&dir).unwrap();
        for (mode, refused) in [(0o755, false), (0o700, false), (0o775, true), (0o757, true), (0o1777, true)]
        {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let checked = require_exclusive_dir(&dir);
            assert_eq!(checked.is_err(), refused, "mode {mode:o}");
            if let Err(e) = checked {
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
                assert!(e.to_string().contains(&format!("{}", dir.display())), "{e}");
                assert!(e.to_string().contains(&format!("mode {mode:04o}")), "{e}");
            }
        }
        let link = root.path().join("link");
        symlink(&dir, &link).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(require_exclusive_dir(&link).is_err(), "a link to a good directory is still a link");
    }

    #[test]
    fn a_parent_others_could_rename_in_is_refused_unless_sticky() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        for (mode, refused) in
            [(0o755, false), (0o1777, false), (0o1770, false), (0o777, true), (0o775, true)]
        {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let checked = require_no_foreign_renames(&dir);
            assert_eq!(checked.is_err(), refused, "mode {mode:o}");
            if let Err(e) = checked {
                assert!(e.to_string().contains(&format!("without the sticky bit (mode {mode:04o})")), "{e}");
            }
        }
    }

    #[test]
    fn a_dir_in_a_files_place_is_removed_when_empty_and_moved_aside_otherwise() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("lock");
        assert_eq!(clear_dir_in_place(&path).unwrap(), Cleared::Nothing);
        std::fs::write(&path, "").unwrap();
        assert_eq!(clear_dir_in_place(&path).unwrap(), Cleared::Nothing, "a file is left alone");
        std::fs::remove_file(&path).unwrap();

        std::fs::create_dir(&path).unwrap();
        assert_eq!(clear_dir_in_place(&path).unwrap(), Cleared::RemovedEmpty);
        assert!(std::fs::symlink_metadata(&path).is_err());

        for n in 0..2 {
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("content"), format!("kept {n}")).unwrap();
            let aside = root.path().join(format!(".lock.damaged.{n}"));
            assert_eq!(clear_dir_in_place(&path).unwrap(), Cleared::MovedAside(aside.clone()));
            assert!(std::fs::symlink_metadata(&path).is_err());
            assert_eq!(std::fs::read_to_string(aside.join("content")).unwrap(), format!("kept {n}"));
        }

        // A link to a directory is not a directory: neither it nor its target is touched.
        let target = root.path().join("target");
        std::fs::create_dir(&target).unwrap();
        symlink(&target, &path).unwrap();
        assert_eq!(clear_dir_in_place(&path).unwrap(), Cleared::Nothing);
        assert!(target.is_dir());
    }
}
