//! Listening sockets on a gateway address. They are bound with IP_FREEBIND so a network's
//! listener can be made before the bridge has its address (and survives the address going
//! and coming back), and with SO_REUSEADDR so a restarted resolver rebinds at once.
//! Binding the gateway address only (never the wildcard) is what leaves port 53 on the
//! host's other addresses free, for a host resolver or a container publishing port 53.

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
    Ok(UdpSocket::from(bound(addr, Kind::Datagram)?))
}

pub fn tcp(addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let fd = bound(addr, Kind::Stream)?;
    inet::listen(&fd, backlog)?;
    Ok(TcpListener::from(fd))
}
