//! The byte-level side of a netlink conversation: a NETLINK_ROUTE socket, or (in unit tests)
//! a scripted fake that replays canned kernel replies.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Sends requests and receives whole datagrams.
pub(crate) trait Transport: Send {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Receives one datagram from the kernel. `timeout` of `None` blocks.
    /// Returns `Ok(None)` when the timeout expired.
    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<Option<Vec<u8>>>;
    /// The port id the kernel assigned to us (0 for fakes).
    fn port_id(&self) -> u32;
    /// Joins a multicast group (RTNLGRP_* number, not the legacy bitmask).
    fn join_group(&mut self, group: u32) -> io::Result<()>;
    fn leave_group(&mut self, group: u32) -> io::Result<()>;
    /// The socket's descriptor, for work handed to another process (`None` for fakes).
    fn raw_fd(&self) -> Option<std::os::fd::RawFd>;
}

/// A real NETLINK_ROUTE socket, bound to the network namespace of the thread that created it.
pub(crate) struct KernelSocket {
    socket: Socket,
    port_id: u32,
}

impl KernelSocket {
    pub(crate) fn open() -> io::Result<KernelSocket> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        let addr = socket.bind_auto()?;
        // Strict checking makes the kernel honour filters in dump requests and reject
        // malformed ones instead of silently ignoring header fields.
        socket.set_netlink_get_strict_chk(true)?;
        // Extended acks give a human-readable reason with EINVAL & co; capped acks keep
        // error replies small (the request is not echoed back in full).
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        // Big dumps (many routes) arrive in several datagrams; a larger buffer avoids
        // ENOBUFS on event subscriptions.
        let _ = socket.set_rx_buf_sz(1 << 20);
        Ok(KernelSocket { socket, port_id: addr.port_number() })
    }
}

impl Transport for KernelSocket {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let kernel = SocketAddr::new(0, 0);
        let sent = self.socket.send_to(bytes, &kernel, 0)?;
        if sent != bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short netlink send: {sent} of {} bytes", bytes.len()),
            ));
        }
        Ok(())
    }

    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(timeout) = timeout {
                if !wait_readable(self.socket.as_raw_fd(), timeout)? {
                    return Ok(None);
                }
            }
            match self.socket.recv_from_full() {
                // Only the kernel (port 0) speaks for the kernel.
                Ok((bytes, from)) if from.port_number() == 0 => return Ok(Some(bytes)),
                Ok(_) => continue,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }

    fn port_id(&self) -> u32 {
        self.port_id
    }

    fn join_group(&mut self, group: u32) -> io::Result<()> {
        self.socket.add_membership(group)
    }

    fn leave_group(&mut self, group: u32) -> io::Result<()> {
        self.socket.drop_membership(group)
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.socket.as_raw_fd())
    }
}

/// Polls `fd` for readability; false on timeout.
fn wait_readable(fd: i32, timeout: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: pollfd is a valid, initialised array of one element.
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
