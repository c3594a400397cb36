//! IP sockets made the way our daemons need them, and the one home of their socket
//! options: the DHCP clients (v4 and v6), cni-dnsd's listeners and cni-net's neighbour
//! announcements all set options through here, so each option has one spelling.
//!
//! Every option is a typed call into `rustix` except `SO_BINDTODEVICE`, which rustix does
//! not offer and which is therefore the one `setsockopt(2)` written out here.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

pub use rustix::net::sockopt::{
    set_ip_freebind, set_ipv6_freebind, set_ipv6_multicast_hops, set_ipv6_multicast_if, set_ipv6_v6only,
    set_socket_broadcast, set_socket_reuseaddr,
};

/// What a socket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// UDP.
    Datagram,
    /// TCP.
    Stream,
}

/// A new close-on-exec socket of `kind` for addresses of `addr`'s family (the address
/// itself is not bound: set options first, then [`bind`]).
pub fn socket_for(addr: &SocketAddr, kind: Kind) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let kind = match kind {
        Kind::Datagram => SocketType::DGRAM,
        Kind::Stream => SocketType::STREAM,
    };
    Ok(rustix::net::socket_with(family, kind, SocketFlags::CLOEXEC, None)?)
}

/// Binds `fd` to `addr` (with an IPv6 address's scope id).
pub fn bind(fd: impl AsFd, addr: &SocketAddr) -> io::Result<()> {
    Ok(rustix::net::bind(fd, addr)?)
}

/// Makes a bound stream socket listen, with room for `backlog` pending connections.
pub fn listen(fd: impl AsFd, backlog: i32) -> io::Result<()> {
    Ok(rustix::net::listen(fd, backlog)?)
}

/// Binds socket `fd` to interface `ifname` (`SO_BINDTODEVICE`): it then sends and
/// receives only there, whatever the routes say. A name longer than an interface name
/// can be (15 bytes) or holding a NUL is refused before the kernel sees it.
pub fn bind_to_device(fd: impl AsFd, ifname: &str) -> io::Result<()> {
    if ifname.is_empty() || ifname.len() > 15 || ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{ifname:?} is not an interface name"),
        ));
    }
    let fd = fd.as_fd();
    #[allow(unsafe_code)]
    // SAFETY: a valid descriptor; the name's bytes live for the call and their length is
    // passed, so the kernel reads nothing beyond them.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};

    #[test]
    fn a_datagram_socket_binds_and_carries_a_packet_on_loopback() {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let fd = socket_for(&addr, Kind::Datagram).unwrap();
        set_socket_reuseaddr(&fd, true).unwrap();
        bind(&fd, &addr).unwrap();
        let socket = UdpSocket::from(fd);
        let to = socket.local_addr().unwrap();
        assert_ne!(to.port(), 0, "bound to a port the kernel chose");
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().send_to(b"ping", to).unwrap();
        let mut buf = [0u8; 8];
        let (n, _) = socket.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ping");
    }

    #[test]
    fn a_stream_socket_listens_on_ipv6_loopback() {
        let addr = SocketAddr::from((Ipv6Addr::LOCALHOST, 0));
        let fd = socket_for(&addr, Kind::Stream).unwrap();
        set_ipv6_v6only(&fd, true).unwrap();
        bind(&fd, &addr).unwrap();
        listen(&fd, 4).unwrap();
        let listener = std::net::TcpListener::from(fd);
        let to = listener.local_addr().unwrap();
        std::net::TcpStream::connect(to).unwrap();
        listener.accept().unwrap();
    }

    #[test]
    fn binding_to_a_device_is_seen_by_the_kernel() {
        let fd = socket_for(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), Kind::Datagram).unwrap();
        match bind_to_device(&fd, "lo") {
            // Unprivileged runs may lack CAP_NET_RAW on old kernels; root always succeeds.
            Err(e) if !crate::is_root() && e.kind() == io::ErrorKind::PermissionDenied => return,
            other => other.unwrap(),
        }
        let mut name = [0u8; 16];
        let mut len = name.len() as libc::socklen_t;
        #[allow(unsafe_code)]
        // SAFETY: a valid descriptor; name and len are live locals of the sizes passed.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                name.as_mut_ptr().cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(&name[..2], b"lo");
    }

    #[test]
    fn a_name_no_interface_can_have_is_refused() {
        let fd = socket_for(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), Kind::Datagram).unwrap();
        for bad in ["", "a-name-far-too-long", "lo\0x"] {
            let err = bind_to_device(&fd, bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
