use super::*;
use std::os::unix::fs::{symlink, MetadataExt};

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
    for (mode, refused) in [(0o755, false), (0o700, false), (0o775, true), (0o757, true), (0o1777, true)] {
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
    for (mode, refused) in [(0o755, false), (0o1777, false), (0o1770, false), (0o777, true), (0o775, true)] {
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
