//! Telling a link's neighbours about a new address: a gratuitous ARP for IPv4 and an
//! unsolicited neighbour advertisement for IPv6; and asking a link's routers to advertise
//! now (a router solicitation), for address autoconfiguration.
//!
//! A container interface that shares a segment with other machines (macvlan, ipvlan, a
//! host device) may take over an address another MAC had before; without an announcement
//! peers keep sending to the old MAC until their cache entries expire. Both functions send
//! from the calling thread's namespace, so run them inside [`crate::NetNs::run`].

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, OwnedFd};

use crate::mac::MacAddr;
use cni_os::detach::{detach, Tail};
use cni_os::inet;

const ETH_P_ARP: u16 = 0x0806;

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
    let fd = inet::link_layer_socket(ETH_P_ARP)?;
    inet::send_to_link(&fd, index, ETH_P_ARP, [0xff; 6], &gratuitous_arp(mac, ip))?;
    close_in_background(fd);
    Ok(())
}

/// Closes a packet socket without waiting: its release waits for an RCU grace period
/// (`synchronize_net()`, 6 ms of a 16 ms macvlan ADD as measured), so a detached helper
/// does the last close (see `cni_os::detach`), or this thread if none can be started.
fn close_in_background(fd: OwnedFd) {
    let handoff = detach(fd.as_fd(), Tail::CloseAfterCaller { on_tick: false });
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
    let fd = inet::icmpv6_socket()?;
    // Receivers drop neighbour discovery that did not come with hop limit 255.
    inet::set_ipv6_multicast_hops(&fd, 255)?;
    inet::set_ipv6_multicast_if(&fd, index)?;
    inet::bind(&fd, &SocketAddr::V6(SocketAddrV6::new(target, 0, 0, 0)))?;
    let to = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), 0, 0, index);
    inet::send_to(&fd, &unsolicited_na(mac, target), &SocketAddr::V6(to))
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
    let fd = inet::icmpv6_socket()?;
    // Routers drop neighbour discovery that did not come with hop limit 255.
    inet::set_ipv6_multicast_hops(&fd, 255)?;
    inet::set_ipv6_multicast_if(&fd, index)?;
    let to = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2), 0, 0, index);
    inet::send_to(&fd, &router_solicitation_packet(mac), &SocketAddr::V6(to))
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
