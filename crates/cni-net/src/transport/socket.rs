//! The one netlink socket type, for every protocol cni-net speaks (NETLINK_ROUTE,
//! NETLINK_NETFILTER).
//!
//! A socket belongs to the network namespace of the thread that created it, for its whole
//! life, even if the thread later moves elsewhere: to work on another namespace, create the
//! socket inside it (see [`crate::NetNs::run`]) and use it from anywhere afterwards.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use cni_os::netlink;

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
        let fd = netlink::socket(protocol)?; // bound to a port the kernel picks
        let socket = Socket { fd, recv_buf: Vec::with_capacity(DATAGRAM_BYTES) };
        // Capped acks: the kernel does not copy each request back with its ack.
        socket.set_opt(SOL_NETLINK, NETLINK_CAP_ACK, 1)?;
        // Extended acks give a human-readable reason with EINVAL & co; older kernels may
        // lack them, which only costs the text.
        let _ = socket.set_opt(SOL_NETLINK, NETLINK_EXT_ACK, 1);
        netlink::set_recv_timeout(&socket.fd, RECV_TIMEOUT)?;
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
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Sends one buffer (one or more messages) to the kernel.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<()> {
        loop {
            match netlink::send_to_kernel(&self.fd, bytes) {
                // A datagram socket sends all or nothing; say so if that ever changes.
                Ok(sent) if sent != bytes.len() => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short netlink send: {sent} of {} bytes", bytes.len()),
                    ));
                }
                Ok(_) => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Receives one datagram, from the kernel only. `Ok(None)` when `wait` ran out.
    pub(crate) fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>> {
        if let Wait::For(timeout) = wait {
            if !wait_readable(&self.fd, timeout)? {
                return Ok(None);
            }
        }
        loop {
            // The datagram's real length comes back, so a cut one is noticed.
            let received = match netlink::recv(&self.fd, &mut self.recv_buf, wait == Wait::No) {
                Ok(received) => received,
                Err(err) => match err.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Ok(None),
                    _ => return Err(err),
                },
            };
            let got = received.len;
            if got > self.recv_buf.capacity() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink datagram of {got} bytes truncated to {}", self.recv_buf.capacity()),
                ));
            }
            // Only the kernel (port 0) speaks for the kernel.
            if received.port != 0 {
                continue;
            }
            return Ok(Some(&self.recv_buf));
        }
    }

    fn set_opt(&self, level: i32, name: i32, value: i32) -> io::Result<()> {
        netlink::set_int_option(&self.fd, level, name, value)
    }
}

/// Waits up to `timeout` for `fd` to become readable; false when the time ran out. A
/// signal that interrupts the wait does not end it early.
fn wait_readable(fd: impl AsFd, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if cni_os::poll::readable(&fd, left)? {
            return Ok(true);
        }
        if left.is_zero() || Instant::now() >= deadline {
            return Ok(false);
        }
    }
}
