//! The socket options both DHCP clients set on their UDP socket, in one place.

use std::io;
use std::os::fd::RawFd;

/// Sets integer option `name` at `level` on socket `fd`.
pub fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: valid fd; the option value points at a c_int that lives for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds socket `fd` to interface `ifname` (SO_BINDTODEVICE): it sends and receives only
/// there, whatever the routes say.
pub fn bind_to_device(fd: RawFd, ifname: &str) -> io::Result<()> {
    // SAFETY: valid fd; the name buffer lives for the call and its length is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            ifname.as_ptr().cast(),
            ifname.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
