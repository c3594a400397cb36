//! Telling a link's neighbours about a new address: a gratuitous ARP for IPv4 and an
//! unsolicited neighbour advertisement for IPv6; and asking a link's routers to advertise
//! now (a router solicitation), for address autoconfiguration.
//!
//! A container interface that shares a segment with other machines (macvlan, ipvlan, a
//! host device) may take over an address another MAC had before; without an announcement
//! peers keep sending to the old MAC until their cache entries expire. Both functions send
//! from the calling thread's namespace, so run them inside [`crate::NetNs::run`].

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::mac::MacAddr;
use cni_os::inet;

const ETH_P_ARP: u16 = 0x0806;

fn socket(domain: i32, kind: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket() has no memory preconditions; a non-negative result is a new fd we own.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The 28-byte ARP request a gratuitous ARP is: sender and target address both `ip`.
fn gratuitous_arp(mac: MacAddr, ip: Ipv4Addr) -> [u8; 28] {
    let mut packet = [0u8; 28];
    packet[0..2].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
    packet[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // IPv4
    packet[4] = 6;
    packet[5] = 4;
    packet[6..8].copy_from_slice(&1u16.to_be_bytes()); // request
    packet[8..14].copy_from_slice(&mac.0);
    packet[14..18].copy_from_slice(&ip.octets());
    // Target hardware address stays zero, as in a request.
    packet[24..28].copy_from_slice(&ip.octets());
    packet
}

/// Broadcasts a gratuitous ARP for `ip` from link `index` with MAC `mac`.
pub fn gratuitous_arp_v4(index: u32, mac: MacAddr, ip: Ipv4Addr) -> io::Result<()> {
    let fd = socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(ETH_P_ARP.to_be()))?;
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_protocol = ETH_P_ARP.to_be();
    to.sll_ifindex = index as i32;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    let packet = gratuitous_arp(mac, ip);
    // SAFETY: the buffer and the address are valid for the lengths passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    close_in_background(fd);
    Ok(())
}

/// Closes a packet socket without waiting: its release waits for an RCU grace period
/// (`synchronize_net()`, 6 ms of a 16 ms macvlan ADD as measured), so a detached helper
/// does the last close (see `crate::detach`), or this thread if none can be started.
fn close_in_background(fd: OwnedFd) {
    let handoff =
        crate::detach::detach(fd.as_raw_fd(), crate::detach::Tail::CloseAfterCaller { on_tick: false });
    drop(fd);
    drop(handoff);
}

/// An unsolicited neighbour advertisement (RFC 4861 4.4) for `target`, override flag set,
/// with the target link-layer address option. The kernel fills in the checksum.
fn unsolicited_na(mac: MacAddr, target: Ipv6Addr) -> [u8; 32] {
    let mut packet = [0u8; 32];
    packet[0] = 136; // neighbour advertisement
    packet[4] = 0x20; // override
    packet[8..24].copy_from_slice(&target.octets());
    packet[24] = 2; // target link-layer address
    packet[25] = 1; // length in units of 8 bytes
    packet[26..32].copy_from_slice(&mac.0);
    packet
}

/// Sends an unsolicited neighbour advertisement for `target` to all nodes on link `index`.
pub fn unsolicited_na_v6(index: u32, mac: MacAddr, target: Ipv6Addr) -> io::Result<()> {
    let fd = socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6)?;
    // Receivers drop neighbour discovery that did not come with hop limit 255.
    inet::set_ipv6_multicast_hops(&fd, 255)?;
    inet::set_ipv6_multicast_if(&fd, index)?;
    // SAFETY: sockaddr_in6 is plain old data; all-zero is a valid starting value.
    let mut from: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    from.sin6_family = libc::AF_INET6 as u16;
    from.sin6_addr.s6_addr = target.octets();
    // SAFETY: the address is valid for the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&from as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut to = from;
    to.sin6_addr.s6_addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets();
    to.sin6_scope_id = index;
    let packet = unsolicited_na(mac, target);
    send_to(&fd, &packet, &to)
}

/// A router solicitation (RFC 4861 4.1) with the source link-layer address option, which
/// lets the router answer without resolving us first. The kernel fills in the checksum.
fn router_solicitation_packet(mac: MacAddr) -> [u8; 16] {
    let mut packet = [0u8; 16];
    packet[0] = 133; // router solicitation
    packet[8] = 1; // source link-layer address
    packet[9] = 1; // length in units of 8 bytes
    packet[10..16].copy_from_slice(&mac.0);
    packet
}

/// Asks the routers on link `index` (MAC `mac`) to advertise now, to all-routers. The
/// kernel solicits by itself only when the link comes up and only while it accepts router
/// advertisements; a link that was up before is otherwise left waiting for the next
/// unsolicited advertisement, minutes away. The link must have a usable (non-tentative)
/// link-local address: it is the source, and the option may not go with `::`.
pub fn router_solicitation(index: u32, mac: MacAddr) -> io::Result<()> {
    let fd = socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6)?;
    // Routers drop neighbour discovery that did not come with hop limit 255.
    inet::set_ipv6_multicast_hops(&fd, 255)?;
    inet::set_ipv6_multicast_if(&fd, index)?;
    // SAFETY: sockaddr_in6 is plain old data; all-zero is a valid starting value.
    let mut to: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    to.sin6_family = libc::AF_INET6 as u16;
    to.sin6_addr.s6_addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2).octets();
    to.sin6_scope_id = index;
    let packet = router_solicitation_packet(mac);
    send_to(&fd, &packet, &to)
}

/// Sends one datagram on `fd` to `to`.
fn send_to(fd: &OwnedFd, packet: &[u8], to: &libc::sockaddr_in6) -> io::Result<()> {
    // SAFETY: the buffer and the address are valid for the lengths passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (to as *const libc::sockaddr_in6).cast(),
            std::mem::size_of::<libc::sockaddr_in6>() as u32,
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

    #[test]
    fn packets_have_the_wire_layout() {
        let mac = MacAddr([0xc2, 0x11, 0x22, 0x33, 0x44, 0x55]);
        let arp = gratuitous_arp(mac, Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(&arp[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&arp[14..18], &arp[24..28]);
        let na = unsolicited_na(mac, "fd00::5".parse().unwrap());
        assert_eq!((na[0], na[4], na[24], na[25]), (136, 0x20, 2, 1));
        assert_eq!(&na[26..], &mac.0);
        let rs = router_solicitation_packet(mac);
        assert_eq!((rs[0], rs[1], rs[8], rs[9]), (133, 0, 1, 1));
        assert_eq!(&rs[10..], &mac.0);
    }
}
