//! Whole-file advisory locks (`flock(2)`), the one way the workspace serialises work on a
//! shared file or namespace across threads and processes. A signal interrupting the wait
//! is retried here, so no caller can mistake it for a failure.

use std::fs::File;
use std::io;

/// Waits for an exclusive lock on `file`; it is released when the file is closed (every
/// descriptor of it) or by [`unlock`].
pub fn exclusive(file: &File) -> io::Result<()> {
    flock_retrying(file, rustix::fs::FlockOperation::LockExclusive)
}

/// Takes an exclusive lock on `file` if nobody holds one: `Ok(false)` when another
/// descriptor holds it.
pub fn try_exclusive(file: &File) -> io::Result<bool> {
    match flock_retrying(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// Releases a lock taken on `file`.
pub fn unlock(file: &File) -> io::Result<()> {
    flock_retrying(file, rustix::fs::FlockOperation::Unlock)
}

fn flock_retrying(file: &File, operation: rustix::fs::FlockOperation) -> io::Result<()> {
    loop {
        match rustix::fs::flock(file, operation) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_descriptor_waits_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = File::create(&path).unwrap();
        let second = File::open(&path).unwrap();
        exclusive(&first).unwrap();
        assert!(!try_exclusive(&second).unwrap(), "held by the first descriptor");
        unlock(&first).unwrap();
        assert!(try_exclusive(&second).unwrap(), "free once the first let go");
        assert!(!try_exclusive(&first).unwrap(), "now held by the second");
        drop(second);
        exclusive(&first).unwrap();
    }
}
