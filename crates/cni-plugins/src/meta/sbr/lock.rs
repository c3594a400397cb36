//! An exclusive lock on the container's namespace file, held while sbr works in it.

use cni_sdk::CniError;
use std::fs::File;

/// Held until dropped (closing the file releases the lock).
pub struct NamespaceLock {
    _file: File,
}

impl NamespaceLock {
    pub fn acquire(netns_path: &str) -> Result<NamespaceLock, CniError> {
        let file = File::open(netns_path)
            .map_err(|e| CniError::internal(format!("sbr: cannot open {netns_path} to lock it: {e}")))?;
        cni_os::lock::exclusive(&file)
            .map_err(|e| CniError::internal(format!("sbr: cannot lock {netns_path}: {e}")))?;
        Ok(NamespaceLock { _file: file })
    }
}
