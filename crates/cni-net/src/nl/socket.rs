//! The one netlink socket type, for every protocol cni-net speaks (NETLINK_ROUTE,
//! NETLINK_NETFILTER).
//!
//! A socket belongs to the network namespace of the thread that created it, for its whole
//! life, even if the thread later moves elsewhere: to work on another namespace, create the
//! socket inside it (see [`crate::NetNs::run`]) and use it from anywhere afterwards.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `SOL_NETLINK` and its options, from `linux/netlink.h`.
const SOL_NETLINK: i32 = 270;
const NETLINK_ADD_MEMBERSHIP: i32 = 1;
const NETLINK_DROP_MEMBERSHIP: i32 = 2;
const NETLINK_CAP_ACK: i32 = 10;
const NETLINK_EXT_ACK: i32 = 11;
const NETLINK_GET_STRICT_CHK: i32 = 12;

/// How long a blocking receive waits. The kernel answers a request while processing the
/// `send` and a dump chunk while processing the `recv`, so this only matters if something
/// is broken: it turns a hang into an error.
const RECV_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest datagram we expect: the kernel sizes dump chunks by the reader's buffer,
/// capped at 32 KiB, and acks and single answers are smaller. A longer one (a link with
/// hundreds of VFs) is reported as truncated rather than misread.
const DATAGRAM_BYTES: usize = 64 << 10;
/// The kernel doubles the value it is given, an `int`.
const MAX_BUFFER_BYTES: usize = 1 << 30;

/// How long [`Socket::recv`] may wait for a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Until one arrives (or the socket's 10 s receive timeout, then `Ok(None)`).
    Block,
    /// Not at all: `Ok(None)` when nothing is queued.
    No,
    /// At most this long (polls first; for notifications).
    For(Duration),
}

/// A netlink socket bound to an automatically assigned port.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
    /// Reused for every datagram: receiving allocates nothing.
    recv_buf: Vec<u8>,
}

impl Socket {
    /// Opens and binds a socket of `protocol` with capped and extended acks on (short
    /// error replies that still carry the kernel's reason text).
    pub(crate) fn open(protocol: i32) -> io::Result<Socket> {
        // SAFETY: plain socket(2) call with constant arguments; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let socket = Socket { fd, recv_buf: Vec::with_capacity(DATAGRAM_BYTES) };
        socket.bind()?;
        // Capped acks: the kernel does not copy each request back with its ack.
        socket.set_opt(SOL_NETLINK, NETLINK_CAP_ACK, 1)?;
        // Extended acks give a human-readable reason with EINVAL & co; older kernels may
        // lack them, which only costs the text.
        let _ = socket.set_opt(SOL_NETLINK, NETLINK_EXT_ACK, 1);
        socket.set_recv_timeout(RECV_TIMEOUT)?;
        Ok(socket)
    }

    /// Makes the kernel honour filters in dump requests and reject malformed ones instead
    /// of silently ignoring header fields (rtnetlink).
    pub(crate) fn set_strict_checking(&self) -> io::Result<()> {
        self.set_opt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
    }

    /// Asks for a receive buffer of `bytes` (capped by `net.core.rmem_max`): room for
    /// notifications that arrive faster than they are read.
    pub(crate) fn set_recv_buffer(&self, bytes: usize) -> io::Result<()> {
        self.set_opt(libc::SOL_SOCKET, libc::SO_RCVBUF, bytes.min(MAX_BUFFER_BYTES) as i32)
    }

    /// Makes both socket buffers hold at least `bytes`: a batch must fit in one send, and
    /// every answer to it is queued before the first is read.
    pub(crate) fn grow_buffers(&self, bytes: usize) -> io::Result<()> {
        let bytes = bytes.min(MAX_BUFFER_BYTES) as i32;
        // The *FORCE variants need CAP_NET_ADMIN, which plugins have; fall back to the
        // ones capped by net.core.[rw]mem_max.
        for (forced, capped) in
            [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
        {
            if self.set_opt(libc::SOL_SOCKET, forced, bytes).is_err() {
                self.set_opt(libc::SOL_SOCKET, capped, bytes)?;
            }
        }
        Ok(())
    }

    /// Joins a multicast group (the group's number, not the legacy bitmask).
    pub(crate) fn join_group(&self, group: u32) -> io::Result<()> {
        self.set_opt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group as i32)
    }

    pub(crate) fn leave_group(&self, group: u32) -> io::Result<()> {
        self.set_opt(SOL_NETLINK, NETLINK_DROP_MEMBERSHIP, group as i32)
    }

    /// The descriptor, for work handed to another process.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends one buffer (one or more messages) to the kernel.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let kernel = sockaddr(); // port 0 addresses the kernel
        loop {
            // SAFETY: `bytes` and `kernel` are valid for reads of the lengths given, and
            // live across the call.
            let sent = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    0,
                    (&kernel as *const libc::sockaddr_nl).cast(),
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                )
            };
            if sent >= 0 {
                // A datagram socket sends all or nothing; say so if that ever changes.
                if sent as usize != bytes.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short netlink send: {sent} of {} bytes", bytes.len()),
                    ));
                }
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Receives one datagram, from the kernel only. `Ok(None)` when `wait` ran out.
    pub(crate) fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>> {
        if let Wait::For(timeout) = wait {
            if !wait_readable(self.fd.as_raw_fd(), timeout)? {
                return Ok(None);
            }
        }
        let flags = if wait == Wait::No { libc::MSG_DONTWAIT } else { 0 };
        loop {
            let mut from = sockaddr();
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: the buffer is valid for writes of its whole capacity, `from` and
            // `from_len` for the address; all live across the call. MSG_TRUNC makes the
            // call return the datagram's real length, so a cut one is noticed.
            let got = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.recv_buf.as_mut_ptr().cast(),
                    self.recv_buf.capacity(),
                    flags | libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if got < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Ok(None),
                    _ => return Err(err),
                }
            }
            let got = got as usize;
            if got > self.recv_buf.capacity() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink datagram of {got} bytes truncated to {}", self.recv_buf.capacity()),
                ));
            }
            // Only the kernel (port 0) speaks for the kernel.
            if from.nl_pid != 0 {
                continue;
            }
            // SAFETY: the kernel wrote `got` bytes, no more than the capacity (checked).
            unsafe { self.recv_buf.set_len(got) };
            return Ok(Some(&self.recv_buf));
        }
    }

    fn bind(&self) -> io::Result<()> {
        let addr = sockaddr(); // port 0: the kernel picks one
                               // SAFETY: `addr` is a valid sockaddr_nl and the length is its size.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn set_opt(&self, level: i32, name: i32, value: i32) -> io::Result<()> {
        // SAFETY: the option value is an int that lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
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

    fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `tv` is a valid timeval that lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// An `AF_NETLINK` address with port 0 and no groups.
fn sockaddr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data, for which all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr
}

/// Polls `fd` for readability; false on timeout.
fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: `pollfd` is one valid, initialised pollfd that lives across the call.
        let rc = unsafe { libc::poll(&mut pollfd, 1, millis) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(rc > 0);
    }
}
