//! Persistent TUN/TAP devices.
//!
//! These cannot be created over rtnetlink: the tun driver makes a device when a
//! `/dev/net/tun` fd is attached with `TUNSETIFF`, and `TUNSETPERSIST` keeps it after the fd
//! is closed. The device is created in the namespace of the thread that opened
//! `/dev/net/tun`, so for another namespace the whole sequence runs inside [`NetNs::run`].
//! Delete it like any link, with [`super::Netlink::delete_link`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

use crate::error::{Error, Result};
use crate::netlink::link::validate_link_name;
use crate::netns::NetNs;

// From <linux/if_tun.h>: _IOW('T', n, int).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb;
const TUNSETOWNER: libc::c_ulong = 0x4004_54cc;
const TUNSETGROUP: libc::c_ulong = 0x4004_54ce;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_NO_PI: libc::c_short = 0x1000;

/// Layer 3 (tun) or layer 2 (tap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunType {
    Tun,
    Tap,
}

/// A persistent TUN/TAP device to create.
#[derive(Debug, Clone)]
pub struct TunSpec {
    pub name: String,
    pub kind: TunType,
    /// Allow several queues (fds) to be attached later.
    pub multi_queue: bool,
    /// User allowed to attach to the device.
    pub owner: Option<u32>,
    /// Group allowed to attach to the device.
    pub group: Option<u32>,
}

impl TunSpec {
    /// A single-queue tap named `name`, usable by root only.
    pub fn tap(name: impl Into<String>) -> TunSpec {
        TunSpec { name: name.into(), kind: TunType::Tap, multi_queue: false, owner: None, group: None }
    }
}

/// `struct ifreq` restricted to the name and flags the tun ioctls use.
#[repr(C)]
struct InterfaceRequest {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _padding: [u8; 22],
}

/// Creates a persistent TUN/TAP device in `ns` (or the calling thread's namespace).
pub fn create_tun(spec: &TunSpec, ns: Option<&NetNs>) -> Result<()> {
    validate_link_name(&spec.name)?;
    match ns {
        Some(ns) => ns.run(|| create_here(spec))?,
        None => create_here(spec),
    }
}

/// Opens a queue of the existing device `spec.name` in the calling thread's namespace, as
/// a VM monitor does: the returned file reads and writes the device's frames. A
/// single-queue device takes one queue; `multi_queue` ones as many as are opened.
pub fn attach_tun(spec: &TunSpec) -> Result<File> {
    validate_link_name(&spec.name)?;
    open_queue(spec)
}

/// `/dev/net/tun` attached to `spec.name` with `TUNSETIFF` (which makes the device if
/// there is none of that name).
fn open_queue(spec: &TunSpec) -> Result<File> {
    let device = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|source| Error::Tun { op: "open /dev/net/tun for", name: spec.name.clone(), source })?;
    let mut request = InterfaceRequest {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_NO_PI
            | match spec.kind {
                TunType::Tun => IFF_TUN,
                TunType::Tap => IFF_TAP,
            },
        _padding: [0; 22],
    };
    if spec.multi_queue {
        request.flags |= IFF_MULTI_QUEUE;
    }
    request.name[..spec.name.len()].copy_from_slice(spec.name.as_bytes());

    // SAFETY: the fd is an open /dev/net/tun; request is a properly sized, initialised ifreq.
    if unsafe { libc::ioctl(device.as_raw_fd(), TUNSETIFF, &mut request) } < 0 {
        let source = io::Error::last_os_error();
        return Err(Error::Tun { op: "attach", name: spec.name.clone(), source });
    }
    Ok(device)
}

fn create_here(spec: &TunSpec) -> Result<()> {
    let fail = |op: &'static str| {
        let source = io::Error::last_os_error();
        move || Error::Tun { op, name: spec.name.clone(), source }
    };
    let device = open_queue(spec)?;
    let fd = device.as_raw_fd();

    if let Some(owner) = spec.owner {
        // SAFETY: TUNSETOWNER takes the uid by value.
        if unsafe { libc::ioctl(fd, TUNSETOWNER, owner as libc::c_ulong) } < 0 {
            return Err(fail("set owner of")());
        }
    }
    if let Some(group) = spec.group {
        // SAFETY: TUNSETGROUP takes the gid by value.
        if unsafe { libc::ioctl(fd, TUNSETGROUP, group as libc::c_ulong) } < 0 {
            return Err(fail("set group of")());
        }
    }
    // SAFETY: TUNSETPERSIST takes a flag by value.
    if unsafe { libc::ioctl(fd, TUNSETPERSIST, 1 as libc::c_ulong) } < 0 {
        return Err(fail("make persistent")());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_has_kernel_layout() {
        assert_eq!(std::mem::size_of::<InterfaceRequest>(), 40);
        assert!(create_tun(&TunSpec::tap("bad/name"), None).is_err());
    }
}
