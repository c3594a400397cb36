//! The tun driver's ioctls on an open `/dev/net/tun`: attaching it to a device (made if
//! there is none of that name), and the device's owner, group and persistence. cni-net's
//! `create_tun`/`attach_tun` are built on these.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

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
pub enum Kind {
    Tun,
    Tap,
}

/// `struct ifreq` restricted to the name and flags the tun ioctls use.
#[repr(C)]
struct InterfaceRequest {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _padding: [u8; 22],
}

/// Attaches the open `/dev/net/tun` `device` to the device `name` of `kind`, without
/// packet information headers (`TUNSETIFF`), making the device if there is none; with
/// `multi_queue`, more queues may be attached later. A name that cannot be an interface
/// name (empty, 16 bytes or more, holding a NUL) is refused before the kernel sees it.
pub fn attach(device: impl AsFd, name: &str, kind: Kind, multi_queue: bool) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    let mut request = InterfaceRequest {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_NO_PI
            | match kind {
                Kind::Tun => IFF_TUN,
                Kind::Tap => IFF_TAP,
            },
        _padding: [0; 22],
    };
    if multi_queue {
        request.flags |= IFF_MULTI_QUEUE;
    }
    request.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one ifreq; `request` is one, initialised, with a
    // NUL-terminated name, and lives across the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::ioctl(device.as_fd().as_raw_fd(), TUNSETIFF, &mut request) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lets user `uid` attach to the device `device` is attached to (`TUNSETOWNER`).
pub fn set_owner(device: impl AsFd, uid: u32) -> io::Result<()> {
    by_value(device, TUNSETOWNER, uid.into())
}

/// Lets group `gid` attach to the device (`TUNSETGROUP`).
pub fn set_group(device: impl AsFd, gid: u32) -> io::Result<()> {
    by_value(device, TUNSETGROUP, gid.into())
}

/// Keeps the device after its last queue is closed (`TUNSETPERSIST`).
pub fn set_persistent(device: impl AsFd) -> io::Result<()> {
    by_value(device, TUNSETPERSIST, 1)
}

/// A tun ioctl `request` that takes its argument by value.
fn by_value(device: impl AsFd, request: libc::c_ulong, value: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the three requests used here take an integer by value, not a pointer: the
    // kernel reads no memory of ours.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::ioctl(device.as_fd().as_raw_fd(), request, value) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_has_the_kernels_layout_and_bad_names_stay_out() {
        assert_eq!(std::mem::size_of::<InterfaceRequest>(), 40);
        let file = std::fs::File::open("/dev/null").unwrap();
        for name in ["", "sixteen-bytes-xx", "nul\0"] {
            let err = attach(&file, name, Kind::Tap, false).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
    }
}
