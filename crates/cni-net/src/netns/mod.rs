//! Network namespaces.
//!
//! A [`NetNs`] owns an open fd of a network namespace. Code that must run *inside* a
//! namespace (sysctls via `/proc`, creating sockets) runs through [`NetNs::run`], which moves
//! the calling thread in with `setns(2)` and back out when the code returns or panics — the
//! way the reference's `ns.Do` does. A helper thread per call did the same job without ever
//! moving the caller, but cost ~0.1 ms each (stack, malloc arena, TLB shootdowns at its
//! exit): 13% of all CPU time in an 8-worker bench. A thread that cannot be moved back
//! aborts the process rather than carry on in the wrong namespace. Once created, a socket
//! stays bound to its namespace: see [`crate::netlink::Netlink::in_ns`].

mod named;

pub use named::{create_named, remove_named, OwnedNamedNs, DEFAULT_NETNS_DIR};

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Moves the calling thread back into the namespace it holds when dropped.
struct ReturnTo(NetNs);

impl Drop for ReturnTo {
    fn drop(&mut self) {
        let home = &self.0;
        if let Err(e) = enter(&home.file, &home.path) {
            eprintln!("cannot return to the original network namespace: {e}; aborting");
            std::process::abort();
        }
    }
}

/// Moves the calling thread into the namespace open as `ns` (found at `path`).
fn enter(ns: &File, path: &Path) -> Result<()> {
    cni_os::namespace::enter_network(ns).map_err(|source| Error::Namespace {
        op: "setns into",
        path: path.to_path_buf(),
        source,
    })
}

/// The namespace file of the calling thread (not of the process' main thread).
pub const THREAD_SELF_NETNS: &str = "/proc/thread-self/ns/net";

/// An open network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Opens the namespace at `path` (a `/run/netns/<name>` bind mount, `/proc/<pid>/ns/net`, ...).
    ///
    /// Fails with `EINVAL` if the file is not a network namespace.
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| Error::Namespace {
            op: "open network namespace",
            path: path.clone(),
            source,
        })?;
        let ns = NetNs { file, path };
        ns.check_is_netns()?;
        Ok(ns)
    }

    /// Opens the network namespace of the calling thread.
    pub fn current() -> Result<NetNs> {
        let (pid, tid) = cni_os::namespace::process_and_thread_id();
        let file = File::open(THREAD_SELF_NETNS).map_err(|source| Error::Namespace {
            op: "open network namespace",
            path: THREAD_SELF_NETNS.into(),
            source,
        })?;
        // Keep a path that means the same thing from any thread, for messages.
        let path = PathBuf::from(format!("/proc/{pid}/task/{tid}/ns/net"));
        Ok(NetNs { file, path })
    }

    /// The path this namespace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace's identity: (device, inode) of its nsfs file.
    pub fn id(&self) -> Result<(u64, u64)> {
        let meta = self.file.metadata().map_err(|source| Error::Namespace {
            op: "stat network namespace",
            path: self.path.clone(),
            source,
        })?;
        Ok((meta.dev(), meta.ino()))
    }

    /// True when this is the calling thread's own network namespace.
    ///
    /// Only tests call it (to check where [`NetNs::run`] leaves a thread). The plugin SDK
    /// refuses a `CNI_NETNS` that is the plugin's own namespace with the same comparison of
    /// its own (`refuse_own_namespace` in cni-sdk, which does not depend on cni-net).
    pub fn is_current(&self) -> Result<bool> {
        let current = std::fs::metadata(THREAD_SELF_NETNS).map_err(|source| Error::Namespace {
            op: "stat network namespace",
            path: THREAD_SELF_NETNS.into(),
            source,
        })?;
        Ok(self.id()? == (current.dev(), current.ino()))
    }

    /// Runs `f` with the calling thread inside this namespace and returns its result.
    ///
    /// The thread is moved back to the namespace it was in when `f` returns or panics (the
    /// panic then carries on unchanged). If moving back fails — it needs nothing that the
    /// move in did not, so it does not happen in practice — the process aborts: a thread in
    /// the wrong namespace would silently configure the wrong network.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let home = NetNs::current()?;
        if home.id()? == self.id()? {
            return Ok(f());
        }
        enter(&self.file, &self.path)?;
        let _back = ReturnTo(home);
        Ok(f())
    }

    fn check_is_netns(&self) -> Result<()> {
        let not_netns = |reason: &str| Error::Namespace {
            op: "open network namespace",
            path: self.path.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, reason.to_string()),
        };
        match cni_os::namespace::is_network(&self.file) {
            Ok(true) => Ok(()),
            Ok(false) => Err(not_netns("a namespace, but not a network namespace")),
            Err(_) => Err(not_netns("not a namespace file")),
        }
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for NetNs {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_namespace_is_current() {
        let ns = NetNs::current().unwrap();
        assert!(ns.is_current().unwrap());
    }

    #[test]
    fn regular_file_is_not_a_namespace() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = NetNs::open(file.path()).unwrap_err();
        assert!(matches!(err, Error::Namespace { .. }), "{err}");
    }

    #[test]
    fn run_returns_value_and_resumes_panic() {
        let ns = NetNs::current().unwrap();
        assert_eq!(ns.run(|| 41 + 1).unwrap(), 42);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ns.run(|| panic!("boom from namespace")).unwrap();
        }));
        let payload = caught.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom from namespace"));
    }
}
