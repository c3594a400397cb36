//! IP sockets made the way our daemons need them, and the one home of their socket
//! options: the DHCP clients (v4 and v6), cni-dnsd's listeners and cni-net's neighbour
//! announcements all set options through here, so each option has one spelling.
//!
//! Every option is a typed call into `rustix` except those rustix does not offer:
//! `SO_BINDTODEVICE`, and the packet information (`IP_PKTINFO`, `IPV6_RECVPKTINFO`) that
//! tells a datagram server on which interface each datagram arrived, read with
//! `recvmsg(2)` ([`recv_with_interface`]). Those are written out here, and only here.

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

/// Asks the kernel to tell, with every datagram `fd` receives, the interface it arrived
/// on (`IP_PKTINFO` for an IPv4 socket, `IPV6_RECVPKTINFO` for an IPv6 one); read it with
/// [`recv_with_interface`].
pub fn set_recv_interface(fd: impl AsFd, ipv6: bool) -> io::Result<()> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    let fd = fd.as_fd();
    #[allow(unsafe_code)]
    // SAFETY: a valid descriptor; the option value is a live int whose size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One datagram as [`recv_with_interface`] received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes written to the buffer (a longer datagram is cut to the buffer).
    pub len: usize,
    /// Who sent it.
    pub peer: SocketAddr,
    /// The index of the interface it arrived on; 0 when the kernel did not say (the
    /// socket was not set up with [`set_recv_interface`]).
    pub interface: u32,
}

/// Ancillary data room: one `in6_pktinfo` (the larger of the two) with its header, and
/// alignment for `cmsghdr` (u64 covers it on every Linux ABI).
const CONTROL_WORDS: usize = 8;

/// Receives one datagram on `fd` with its sender and the interface it arrived on, in one
/// `recvmsg(2)`: the same single system call as `recv_from`, so a server that checks the
/// interface of every query pays nothing more than the few bytes of ancillary data.
/// Honours the socket's receive timeout (`WouldBlock` or `TimedOut` when it passes).
pub fn recv_with_interface(fd: impl AsFd, buf: &mut [u8]) -> io::Result<Received> {
    let fd = fd.as_fd();
    let mut peer = std::mem::MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    #[allow(unsafe_code)]
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value that is filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = peer.as_mut_ptr().cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    #[allow(unsafe_code)]
    // SAFETY: every pointer in msg points at a live local or at `buf`, each with its true
    // length; the kernel writes within those lengths only.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(unsafe_code)]
    // SAFETY: the storage was zeroed (a valid value) and the kernel wrote at most its size.
    let peer = socket_address(unsafe { peer.assume_init_ref() }, msg.msg_namelen)?;
    let mut interface = 0;
    #[allow(unsafe_code)]
    // SAFETY: msg is the header the kernel just filled: CMSG_FIRSTHDR/NXTHDR stay within
    // msg_controllen (bounded by `control`), and a payload is read only when the header
    // says it is the pktinfo of the expected level, whose length covers the struct read
    // (read_unaligned: the payload need not be aligned for it).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let (level, kind) = ((*cmsg).cmsg_level, (*cmsg).cmsg_type);
            let len = (*cmsg).cmsg_len as usize;
            if level == libc::IPPROTO_IP
                && kind == libc::IP_PKTINFO
                && len >= libc::CMSG_LEN(std::mem::size_of::<libc::in_pktinfo>() as u32) as usize
            {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::in_pktinfo>());
                interface = info.ipi_ifindex as u32;
            } else if level == libc::IPPROTO_IPV6
                && kind == libc::IPV6_PKTINFO
                && len >= libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as usize
            {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::in6_pktinfo>());
                interface = info.ipi6_ifindex;
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received { len: n as usize, peer, interface })
}

/// The address in a `sockaddr_storage` the kernel filled with `len` bytes.
fn socket_address(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> io::Result<SocketAddr> {
    let len = len as usize;
    let family = libc::c_int::from(storage.ss_family);
    let storage: *const libc::sockaddr_storage = storage;
    if family == libc::AF_INET && len >= std::mem::size_of::<libc::sockaddr_in>() {
        #[allow(unsafe_code)]
        // SAFETY: the family says sockaddr_in, which is plain data smaller than the
        // storage the reference points at.
        let v4 = unsafe { std::ptr::read_unaligned(storage.cast::<libc::sockaddr_in>()) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
        return Ok(SocketAddr::from((ip, u16::from_be(v4.sin_port))));
    }
    if family == libc::AF_INET6 && len >= std::mem::size_of::<libc::sockaddr_in6>() {
        #[allow(unsafe_code)]
        // SAFETY: the family says sockaddr_in6, which is plain data smaller than the
        // storage the reference points at.
        let v6 = unsafe { std::ptr::read_unaligned(storage.cast::<libc::sockaddr_in6>()) };
        let ip = std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr);
        return Ok(SocketAddr::V6(std::net::SocketAddrV6::new(
            ip,
            u16::from_be(v6.sin6_port),
            v6.sin6_flowinfo,
            v6.sin6_scope_id,
        )));
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, format!("a datagram from an address of family {family}")))
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn interface_index(name: &str) -> io::Result<u32> {
    if name.is_empty() || name.len() > 15 || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    let probe = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    Ok(rustix::net::netdevice::name_to_index(&probe, name)?)
}

/// A close-on-exec raw ICMPv6 socket (neighbour discovery: advertisements, solicitations).
pub fn icmpv6_socket() -> io::Result<OwnedFd> {
    use rustix::net::{ipproto, AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socket_with(
        AddressFamily::INET6,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(ipproto::ICMPV6),
    )?)
}

/// Sends `packet` (one datagram) on `fd` to `to` (with an IPv6 address's scope id).
pub fn send_to(fd: impl AsFd, packet: &[u8], to: &SocketAddr) -> io::Result<()> {
    rustix::net::sendto(fd, packet, rustix::net::SendFlags::empty(), to)?;
    Ok(())
}

/// A close-on-exec link-layer datagram socket (`AF_PACKET`, `SOCK_DGRAM`) for frames of
/// EtherType `protocol` (host byte order): the kernel adds the link-layer header.
pub fn link_layer_socket(protocol: u16) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with plain integer arguments; the result is checked.
    #[allow(unsafe_code)]
    let raw = unsafe {
        libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, i32::from(protocol.to_be()))
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by socket() and is owned by nobody else.
    #[allow(unsafe_code)]
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

/// Sends `packet` (one frame's payload, EtherType `protocol` in host byte order) on the
/// link-layer socket `fd` out of interface `index` to hardware address `to` (rustix has
/// no link-layer address type).
pub fn send_to_link(fd: impl AsFd, index: u32, protocol: u16, to: [u8; 6], packet: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
    #[allow(unsafe_code)]
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = index as i32;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&to);
    // SAFETY: the buffer and the address are valid for the lengths passed and live across
    // the call.
    #[allow(unsafe_code)]
    let sent = unsafe {
        libc::sendto(
            fd.as_fd().as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

    #[test]
    fn a_datagram_comes_with_its_sender_and_interface() {
        for local in [SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), SocketAddr::from((Ipv6Addr::LOCALHOST, 0))]
        {
            let fd = socket_for(&local, Kind::Datagram).unwrap();
            if local.is_ipv6() {
                set_ipv6_v6only(&fd, true).unwrap();
            }
            set_recv_interface(&fd, local.is_ipv6()).unwrap();
            bind(&fd, &local).unwrap();
            let server = UdpSocket::from(fd);
            let client = UdpSocket::bind(SocketAddr::new(local.ip(), 0)).unwrap();
            client.send_to(b"ping", server.local_addr().unwrap()).unwrap();
            let mut buf = [0u8; 2];
            let got = recv_with_interface(&server, &mut buf).unwrap();
            // Cut to the buffer, from the client, on loopback.
            assert_eq!((got.len, &buf), (2, b"pi"));
            assert_eq!(got.peer, client.local_addr().unwrap());
            assert_eq!(got.interface, interface_index("lo").unwrap());
        }
    }

    #[test]
    fn without_the_option_the_interface_is_unknown() {
        let server = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        client.send_to(b"x", server.local_addr().unwrap()).unwrap();
        let got = recv_with_interface(&server, &mut [0u8; 8]).unwrap();
        assert_eq!((got.len, got.interface), (1, 0));
        assert!(interface_index("no-such-if0").is_err());
        assert_eq!(interface_index("a\0b").unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
