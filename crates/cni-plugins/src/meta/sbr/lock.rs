//! An exclusive lock on the container's namespace file, held while sbr works in it.

use cni_sdk::CniError;
use std::fs::File;
use std::os::fd::AsRawFd;

/// Held until dropped (closing the file releases the lock).
pub struct NamespaceLock {
    _file: File,
}

impl NamespaceLock {
    pub fn acquire(netns_path: &str) -> Result<NamespaceLock, CniError> {
        let file = File::open(netns_path)
            .map_err(|e| CniError::internal(format!("sbr: cannot open {netns_path} to lock it: {e}")))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(NamespaceLock { _file: file });
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(CniError::internal(format!("sbr: cannot lock {netns_path}: {err}")));
            }
        }
    }
}
