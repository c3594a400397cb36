//! Persistent named network namespaces (what `ip netns add` / `ip netns del` do).
//!
//! A namespace lives as long as something references it; a named one is kept alive by a bind
//! mount of its nsfs file onto a regular file (by default `/run/netns/<name>`, so `ip netns
//! exec <name>` works on it).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use super::{NetNs, THREAD_SELF_NETNS};
use crate::error::{Error, Result};
use crate::Idempotent;

/// Where `ip netns` keeps named namespaces.
pub const DEFAULT_NETNS_DIR: &str = "/run/netns";

/// Creates a new, empty network namespace bound to `<dir>/<name>` and returns it opened.
///
/// The namespace is created by a helper thread (`unshare(CLONE_NEWNET)` only affects that
/// thread), which bind-mounts its own namespace file onto the target and ends. Fails with
/// `EEXIST` if the name is taken. When `dir` is [`DEFAULT_NETNS_DIR`] it is made a shared
/// mount point first, as `ip netns add` does, so the bind mounts are visible from other mount
/// namespaces; any other directory is used as it is (it is not turned into a mount point).
pub fn create_named(dir: impl AsRef<Path>, name: &str) -> Result<NetNs> {
    let dir = dir.as_ref();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::InvalidArgument(format!("invalid network namespace name {name:?}")));
    }
    let path = dir.join(name);
    std::fs::create_dir_all(dir).map_err(|source| Error::Namespace {
        op: "create namespace directory",
        path: dir.to_path_buf(),
        source,
    })?;
    if dir == Path::new(DEFAULT_NETNS_DIR) {
        make_shared_mount(dir)?;
    }

    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map_err(|source| Error::Namespace { op: "create namespace file", path: path.clone(), source })?;

    let bound = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cni-netns-new".into())
            .spawn_scoped(scope, || unshare_and_bind(&path))
            .map_err(|source| Error::Thread { path: path.clone(), source })?
            .join()
            .unwrap_or_else(|payload| std::panic::resume_unwind(payload))
    });
    if let Err(err) = bound {
        let _ = std::fs::remove_file(&path);
        return Err(err);
    }
    NetNs::open(&path).inspect_err(|_| {
        let _ = remove_named(&path);
    })
}

/// Removes a named namespace created by [`create_named`] (or `ip netns add`): lazily unmounts
/// the bind mount and deletes the file. The namespace itself disappears once nothing else
/// (processes, open fds) references it. A missing file is not an error.
pub fn remove_named(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let c_path = path_to_cstring(path)?;
    if let Err(err) = cni_os::namespace::unmount_detached(&c_path) {
        // EINVAL: not a mount point (already unmounted); ENOENT: gone already.
        if !matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
            return Err(Error::Namespace { op: "unmount namespace", path: path.to_path_buf(), source: err });
        }
    }
    std::fs::remove_file(path).ignore_missing().map(drop).map_err(|source| Error::Namespace {
        op: "remove namespace file",
        path: path.to_path_buf(),
        source,
    })
}

/// A named namespace that is removed (as [`remove_named`] does) when this value is dropped,
/// also when its owner fails half-way: the one owner of throwaway namespaces (test
/// namespaces, the bench's, `cnitool demo`'s).
#[derive(Debug)]
pub struct OwnedNamedNs {
    ns: NetNs,
}

impl OwnedNamedNs {
    /// Creates `<dir>/<name>` as [`create_named`] does.
    pub fn create(dir: impl AsRef<Path>, name: &str) -> Result<OwnedNamedNs> {
        create_named(dir, name).map(|ns| OwnedNamedNs { ns })
    }

    /// Brings the namespace's loopback up (a new namespace's is down; most users need it).
    pub fn bring_loopback_up(&self) -> Result<()> {
        let mut netlink = crate::netlink::Netlink::in_ns(&self.ns)?;
        let lo = netlink.require_link("lo")?;
        netlink.set_link_up(lo.index)
    }

    /// The open namespace.
    pub fn netns(&self) -> &NetNs {
        &self.ns
    }

    /// The bind-mounted namespace file (what a runtime passes as `CNI_NETNS`).
    pub fn path(&self) -> &Path {
        self.ns.path()
    }

    /// The namespace's name: its file's name.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        self.ns.path().file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
    }
}

impl Drop for OwnedNamedNs {
    fn drop(&mut self) {
        // Nothing to return an error to from a drop: say so where the owner's output goes.
        if let Err(err) = remove_named(self.ns.path()) {
            eprintln!("cannot remove network namespace {}: {err}", self.ns.path().display());
        }
    }
}

fn unshare_and_bind(target: &Path) -> Result<()> {
    // Moves only this helper thread, which ends right after.
    cni_os::namespace::unshare_network().map_err(|source| Error::Namespace {
        op: "unshare network namespace for",
        path: target.to_path_buf(),
        source,
    })?;
    bind_mount(Path::new(THREAD_SELF_NETNS), target)
}

fn bind_mount(source: &Path, target: &Path) -> Result<()> {
    let c_source = path_to_cstring(source)?;
    let c_target = path_to_cstring(target)?;
    cni_os::namespace::bind_mount(&c_source, &c_target).map_err(|source| Error::Namespace {
        op: "bind mount namespace onto",
        path: target.to_path_buf(),
        source,
    })
}

/// Makes `dir` a shared mount point, bind-mounting it onto itself first if it is not a mount
/// point yet (the same dance `ip netns add` does).
fn make_shared_mount(dir: &Path) -> Result<()> {
    // Two threads doing this at once could both bind-mount the directory onto itself.
    static SERIALIZE: Mutex<()> = Mutex::new(());
    let _guard = SERIALIZE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let c_dir = path_to_cstring(dir)?;
    let make_shared = || cni_os::namespace::make_shared_recursive(&c_dir);
    match make_shared() {
        Ok(()) => return Ok(()),
        // EINVAL: not a mount point yet.
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
        Err(source) => {
            return Err(Error::Namespace { op: "make shared mount", path: dir.to_path_buf(), source })
        }
    }
    bind_mount(dir, dir)?;
    make_shared().map_err(|source| Error::Namespace {
        op: "make shared mount",
        path: dir.to_path_buf(),
        source,
    })
}

fn path_to_cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("path {} contains NUL", path.display())))
}
