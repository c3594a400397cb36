//! Network namespaces at the system-call level: entering one, making one, telling one from
//! another file, and the mounts that keep a named one alive. cni-net's `NetNs` and named
//! namespaces are built on these; the policy (which thread, which path, what error) is
//! theirs.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use rustix::mount::{MountPropagationFlags, UnmountFlags};
use rustix::thread::LinkNameSpaceType;

/// `NS_GET_NSTYPE` from `linux/nsfs.h`: `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Moves the calling thread into the network namespace `ns` (an open namespace file); the
/// kernel refuses any other kind of namespace.
pub fn enter_network(ns: impl AsFd) -> io::Result<()> {
    Ok(rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))?)
}

/// Moves the calling thread into a new, empty network namespace of its own (the rest of
/// the process stays where it is).
pub fn unshare_network() -> io::Result<()> {
    // SAFETY: CLONE_NEWNET changes only the calling thread's network namespace; it touches
    // no memory and no descriptor table (rustix's call is unsafe because of CLONE_FILES,
    // which is not asked for).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the open file `fd` is a network namespace: `Ok(false)` for another kind of
/// namespace, an error (`ENOTTY` & co) for a file that is no namespace at all.
pub fn is_network(fd: impl AsFd) -> io::Result<bool> {
    // SAFETY: NS_GET_NSTYPE takes no argument and only returns a value; the descriptor is
    // borrowed, so open, for the call.
    #[allow(unsafe_code)]
    let kind = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), NS_GET_NSTYPE) };
    if kind < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(kind == libc::CLONE_NEWNET)
}

/// The calling thread's id and its process's id, for a path (`/proc/PID/task/TID/...`)
/// that names this thread's files from any thread.
pub fn process_and_thread_id() -> (u32, u32) {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    (pid as u32, tid as u32)
}

/// Bind-mounts `source` onto `target`.
pub fn bind_mount(source: &CStr, target: &CStr) -> io::Result<()> {
    Ok(rustix::mount::mount_bind(source, target)?)
}

/// Makes the mount point `dir` shared, with everything below it. `EINVAL` if `dir` is not
/// a mount point.
pub fn make_shared_recursive(dir: &CStr) -> io::Result<()> {
    Ok(rustix::mount::mount_change(dir, MountPropagationFlags::SHARED | MountPropagationFlags::REC)?)
}

/// Detaches the mount at `target` now; the kernel cleans it up once it is no longer busy.
pub fn unmount_detached(target: &CStr) -> io::Result<()> {
    Ok(rustix::mount::unmount(target, UnmountFlags::DETACH)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_namespace_file_is_one_and_other_files_are_not() {
        let net = std::fs::File::open("/proc/self/ns/net").unwrap();
        assert!(is_network(&net).unwrap());
        let uts = std::fs::File::open("/proc/self/ns/uts").unwrap();
        assert!(!is_network(&uts).unwrap());
        let plain = std::fs::File::open("/proc/self/status").unwrap();
        assert!(is_network(&plain).is_err());
        let (pid, tid) = process_and_thread_id();
        assert_eq!(pid, std::process::id());
        assert!(std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists());
    }
}
