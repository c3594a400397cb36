//! Network namespaces.
//!
//! A [`NetNs`] owns an open fd of a network namespace. The calling thread never changes
//! namespace: code that must run *inside* a namespace (sysctls via `/proc`, sockets) runs on
//! a short-lived scoped thread that enters it with `setns(2)` and then ends, so no thread can
//! be left in the wrong namespace, not even on error or panic. Netlink work does not need this
//! at all: see [`crate::netlink::Netlink::in_ns`].

mod named;

pub use named::{create_named, remove_named, DEFAULT_NETNS_DIR};

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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
        // SAFETY: getpid/gettid have no preconditions and cannot fail.
        let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
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
    /// The plugin SDK uses it to refuse a `CNI_NETNS` that is the plugin's own namespace.
    pub fn is_current(&self) -> Result<bool> {
        let current = std::fs::metadata(THREAD_SELF_NETNS).map_err(|source| Error::Namespace {
            op: "stat network namespace",
            path: THREAD_SELF_NETNS.into(),
            source,
        })?;
        Ok(self.id()? == (current.dev(), current.ino()))
    }

    /// Runs `f` on a scoped thread that has entered this namespace and returns its result.
    ///
    /// The calling thread's namespace is never changed. If `f` panics, the panic is resumed
    /// on the calling thread (with its original payload) after the helper thread has ended,
    /// so a panic behaves as if `f` had been called directly; the helper thread that was in
    /// the namespace is gone by then.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|scope| {
            let handle = std::thread::Builder::new()
                .name("cni-netns".into())
                .spawn_scoped(scope, move || -> Result<T> {
                    self.enter_on_this_thread()?;
                    Ok(f())
                })
                .map_err(|source| Error::Thread { path: self.path.clone(), source })?;
            match handle.join() {
                Ok(result) => result,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
    }

    /// Moves the calling thread into this namespace. Only for threads that are about to end
    /// (the scoped thread of [`NetNs::run`]) or processes about to exec.
    fn enter_on_this_thread(&self) -> Result<()> {
        // Already there (a new thread starts in its creator's namespace): setns would only
        // need CAP_SYS_ADMIN for nothing.
        if self.is_current()? {
            return Ok(());
        }
        // SAFETY: the fd is owned by self and open for the whole call; CLONE_NEWNET only
        // affects the calling thread, which is a dedicated helper thread.
        let rc = unsafe { libc::setns(self.file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(Error::Namespace {
                op: "setns into",
                path: self.path.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    fn check_is_netns(&self) -> Result<()> {
        // NS_GET_NSTYPE = _IO(0xb7, 0x3) from <linux/nsfs.h>.
        const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
        let not_netns = |reason: &str| Error::Namespace {
            op: "open network namespace",
            path: self.path.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, reason.to_string()),
        };
        // SAFETY: the fd is valid; NS_GET_NSTYPE takes no argument and only returns a value.
        let kind = unsafe { libc::ioctl(self.file.as_raw_fd(), NS_GET_NSTYPE) };
        if kind < 0 {
            return Err(not_netns("not a namespace file"));
        }
        if kind != libc::CLONE_NEWNET {
            return Err(not_netns("a namespace, but not a network namespace"));
        }
        Ok(())
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
