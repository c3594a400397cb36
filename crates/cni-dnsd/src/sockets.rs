//! Listening sockets on a gateway address. They are bound with IP_FREEBIND so a network's
//! listener can be made before the bridge has its address (and survives the address going
//! and coming back), and with SO_REUSEADDR so a restarted resolver rebinds at once.
//! Binding the gateway address only (never the wildcard) is what leaves port 53 on the
//! host's other addresses free, for a host resolver or a container publishing port 53.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
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
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Linux's IPV6_FREEBIND (include/uapi/linux/in6.h).
const IPV6_FREEBIND: libc::c_int = 78;

fn bound(addr: SocketAddr, kind: libc::c_int) -> std::io::Result<OwnedFd> {
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket nobody else owns; OwnedFd closes it on every path.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    match addr {
        SocketAddr::V4(v4) => {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_FREEBIND, 1)?;
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: valid fd; sa is a sockaddr_in that lives for the call, length given.
            let rc = unsafe {
                libc::bind(
                    fd,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of_val(&sa) as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        SocketAddr::V6(v6) => {
            setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_FREEBIND, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: valid fd; sa is a sockaddr_in6 that lives for the call, length given.
            let rc = unsafe {
                libc::bind(
                    fd,
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of_val(&sa) as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(owned)
}

pub fn udp(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    Ok(UdpSocket::from(bound(addr, libc::SOCK_DGRAM)?))
}

pub fn tcp(addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let fd = bound(addr, libc::SOCK_STREAM)?;
    // SAFETY: listen(2) on the socket we own.
    if unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&fd), backlog) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}
