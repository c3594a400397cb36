//! Listening sockets on a gateway address. They are bound with IP_FREEBIND so a network's
//! listener can be made before the bridge has its address (and survives the address going
//! and coming back), and with SO_REUSEADDR so a restarted resolver rebinds at once.
//! Binding the gateway address only (never the wildcard) is what leaves port 53 on the
//! host's other addresses free, for a host resolver or a container publishing port 53.
//!
//! Who may ask is decided per query (`zone::NetworkZone::admits`). UDP sockets ask the
//! kernel for the interface every datagram arrived on (IP_PKTINFO / IPV6_RECVPKTINFO, read
//! by the same single `recvmsg` that reads the query), so a datagram from elsewhere is
//! dropped silently and counted; binding them to the bridge instead would make the kernel
//! answer strangers with ICMP port unreachable, and bind them to an interface index that
//! a re-created bridge no longer has. A TCP listener is bound to the bridge
//! (SO_BINDTODEVICE): a connection cannot say where it came in, and its source is checked
//! at accept (a TCP client cannot spoof one: it must receive our SYN-ACK).

use cni_os::inet::{self, Kind};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;

fn bound(addr: SocketAddr, kind: Kind) -> std::io::Result<OwnedFd> {
    let fd = inet::socket_for(&addr, kind)?;
    inet::set_socket_reuseaddr(&fd, true)?;
    if addr.is_ipv4() {
        inet::set_ip_freebind(&fd, true)?;
    } else {
        inet::set_ipv6_freebind(&fd, true)?;
        inet::set_ipv6_v6only(&fd, true)?;
    }
    inet::bind(&fd, &addr)?;
    Ok(fd)
}

pub fn udp(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let fd = bound(addr, Kind::Datagram)?;
    inet::set_recv_interface(&fd, addr.is_ipv6())?;
    Ok(UdpSocket::from(fd))
}

/// A listener on `addr`, taking connections that arrive on `device` only.
pub fn tcp(addr: SocketAddr, device: &str, backlog: i32) -> std::io::Result<TcpListener> {
    let fd = bound(addr, Kind::Stream)?;
    inet::bind_to_device(&fd, device)?;
    inet::listen(&fd, backlog)?;
    Ok(TcpListener::from(fd))
}
