//! A raw `NETLINK_NETFILTER` socket.
//!
//! The socket belongs to the network namespace of the thread that created it, and stays
//! bound to it for its whole life, even if the thread later moves elsewhere. To program
//! another namespace, create the socket from a thread that is inside it (e.g. a scoped
//! thread that `setns()`es in, opens the socket and comes back), then use it from anywhere.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::error::NftError;
use super::sys::{NETLINK_CAP_ACK, NETLINK_EXT_ACK, NETLINK_NETFILTER, SOL_NETLINK};

/// How long to wait for the kernel's answer before giving up. The kernel answers a batch
/// synchronously while processing `sendmsg`, so this only matters if something is broken.
const RECV_TIMEOUT: Duration = Duration::from_secs(10);
/// Default socket buffers: room for batches of a few thousand operations, their ACKs
/// and dump chunks. [`NetfilterSocket::grow_buffers`] makes room for larger batches.
const BUFFER_BYTES: usize = 4 << 20;
/// The kernel doubles the value it is given; it is an `int`.
const MAX_BUFFER_BYTES: usize = 1 << 30;
/// A datagram is at most a few pages (kernel `NLMSG_GOODSIZE`, 32 KiB for dumps).
const DATAGRAM_BYTES: usize = 64 << 10;

/// A netlink socket talking to the netfilter subsystems (nf_tables, ctnetlink).
#[derive(Debug)]
pub struct NetfilterSocket {
    fd: OwnedFd,
    next_seq: u32,
    recv_buf: Vec<u8>,
}

impl NetfilterSocket {
    /// The descriptor, for handing the socket's last reference elsewhere.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Opens a socket in the calling thread's current network namespace.
    pub fn open() -> Result<Self, NftError> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw =
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_NETFILTER) };
        if raw < 0 {
            return Err(NftError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sock = Self { fd, next_seq: initial_seq(), recv_buf: vec![0; DATAGRAM_BYTES] };
        sock.bind()?;
        // Short ACKs: the kernel need not copy every request back to us.
        sock.set_opt(SOL_NETLINK, NETLINK_CAP_ACK, 1)?;
        // Extended ACKs are nice-to-have (older kernels may lack them): ignore failure.
        let _ = sock.set_opt(SOL_NETLINK, NETLINK_EXT_ACK, 1);
        sock.grow_buffers(BUFFER_BYTES)?;
        sock.set_recv_timeout(RECV_TIMEOUT)?;
        Ok(sock)
    }

    fn bind(&self) -> Result<(), NftError> {
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `addr` is a valid sockaddr_nl and the length matches it.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(NftError::Socket(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Makes both socket buffers hold at least `bytes`: a batch must fit in one send, and
    /// every answer to it is queued before we read the first one.
    pub(crate) fn grow_buffers(&self, bytes: usize) -> Result<(), NftError> {
        let bytes = bytes.clamp(BUFFER_BYTES, MAX_BUFFER_BYTES) as i32;
        // The *FORCE variants need CAP_NET_ADMIN, which every nf_tables user has; fall
        // back to the capped ones.
        for (forced, capped) in
            [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
        {
            if self.set_opt(libc::SOL_SOCKET, forced, bytes).is_err() {
                self.set_opt(libc::SOL_SOCKET, capped, bytes)?;
            }
        }
        Ok(())
    }

    fn set_opt(&self, level: i32, name: i32, value: i32) -> Result<(), NftError> {
        // SAFETY: the option value is an int that lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                &value as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as u32,
            )
        };
        if rc < 0 {
            return Err(NftError::Socket(io::Error::last_os_error()));
        }
        Ok(())
    }

    fn set_recv_timeout(&self, timeout: Duration) -> Result<(), NftError> {
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
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if rc < 0 {
            return Err(NftError::Socket(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// A fresh sequence number for the next request.
    pub(crate) fn seq(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    /// Sends one buffer (one or more messages) to the kernel.
    pub(crate) fn send(&self, bytes: &[u8]) -> Result<(), NftError> {
        // SAFETY: sockaddr_nl is plain data; zeroed (pid 0) addresses the kernel.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as u16;
        loop {
            // SAFETY: `bytes` and `kernel` are valid for the given lengths.
            let sent = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    bytes.as_ptr() as *const libc::c_void,
                    bytes.len(),
                    0,
                    &kernel as *const libc::sockaddr_nl as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_nl>() as u32,
                )
            };
            if sent >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(NftError::Io(err));
            }
        }
    }

    /// Receives one datagram; `Ok(None)` when the receive timeout expired, or at once
    /// when nothing is queued and `wait` is false.
    pub(crate) fn recv(&mut self, wait: bool) -> Result<Option<&[u8]>, NftError> {
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        loop {
            // SAFETY: the buffer is valid for writes of its full length.
            let got = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.recv_buf.as_mut_ptr() as *mut libc::c_void,
                    self.recv_buf.len(),
                    flags,
                )
            };
            if got >= 0 {
                return Ok(Some(&self.recv_buf[..got as usize]));
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Ok(None),
                _ => return Err(NftError::Io(err)),
            }
        }
    }
}

/// Starts sequence numbers somewhere unpredictable so that stale answers from an earlier
/// socket user can never be mistaken for ours.
fn initial_seq() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(1);
    nanos.wrapping_mul(2_654_435_761)
}
