//! Netlink sockets at the system-call level: made and bound, their integer options, one
//! datagram sent to the kernel or received with its sender. cni-net's netlink transport
//! builds on these (its receive buffer, timeouts and retries are its own).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A close-on-exec `AF_NETLINK` raw socket of `protocol` (NETLINK_ROUTE, ...), bound to a
/// port the kernel picks.
pub fn socket(protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with plain integer arguments; the result is checked.
    #[allow(unsafe_code)]
    let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
    #[allow(unsafe_code)]
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let addr = kernel(); // port 0 in a bind: the kernel picks one
                         // SAFETY: `addr` is a valid sockaddr_nl and the length is its size.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Sets the `int` socket option `level`/`name` of `fd` to `value` (the netlink options
/// rustix has no call for; the kernel refuses an option that is not an `int`).
pub fn set_int_option(fd: impl AsFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the option value is an int that lives across the call, and the length given
    // is its size.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets how long a blocking receive on `fd` waits before it fails with `WouldBlock`.
pub fn set_recv_timeout(fd: impl AsFd, timeout: Duration) -> io::Result<()> {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    Ok(set_socket_timeout(fd, Timeout::Recv, Some(timeout))?)
}

/// Sends `bytes` (one datagram) to the kernel; the number of bytes sent.
pub fn send_to_kernel(fd: impl AsFd, bytes: &[u8]) -> io::Result<usize> {
    let kernel = kernel();
    // SAFETY: `bytes` and `kernel` are valid for reads of the lengths given, and live
    // across the call.
    #[allow(unsafe_code)]
    let sent = unsafe {
        libc::sendto(
            fd.as_fd().as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// One datagram received by [`recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The datagram's whole length, which may exceed what the buffer could hold.
    pub len: usize,
    /// The sender's port: 0 for the kernel.
    pub port: u32,
}

/// Receives one datagram on `fd` into `buf`'s whole capacity (`buf` is cleared first and
/// holds what fitted afterwards), without waiting if `dont_wait`. The length returned is
/// the datagram's own (`MSG_TRUNC`), so a datagram cut to fit is noticed.
pub fn recv(fd: impl AsFd, buf: &mut Vec<u8>, dont_wait: bool) -> io::Result<Received> {
    buf.clear();
    let flags = if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    let mut from = kernel();
    let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: the buffer is valid for writes of its whole capacity, `from` and `from_len`
    // for the address; all live across the call.
    #[allow(unsafe_code)]
    let got = unsafe {
        libc::recvfrom(
            fd.as_fd().as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.capacity(),
            flags | libc::MSG_TRUNC,
            (&mut from as *mut libc::sockaddr_nl).cast(),
            &mut from_len,
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = got as usize;
    // SAFETY: the kernel wrote `len` bytes, or the whole capacity if the datagram was
    // longer; no more than that is marked initialised.
    #[allow(unsafe_code)]
    unsafe {
        buf.set_len(len.min(buf.capacity()))
    };
    Ok(Received { len, port: from.nl_pid })
}

/// An `AF_NETLINK` address with port 0 and no groups: the kernel's.
fn kernel() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data, for which all-zero bytes are a valid value.
    #[allow(unsafe_code)]
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr
}
