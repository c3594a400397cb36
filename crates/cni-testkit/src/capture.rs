//! A packet capture on every interface of one namespace (an `AF_PACKET` socket, as tcpdump
//! opens), for tests that prove what crosses a wire: frames are kept whole while the
//! capture runs, then looked at with [`Frame`]'s accessors.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cni_net::NetNs;
use rustix::net::{AddressFamily, Protocol, RecvFlags, SocketType};

/// `ETH_P_ALL` in network order: every protocol.
const ETH_P_ALL_BE: u32 = 0x0003u16.to_be() as u32;
/// Frames kept at most (the rest are counted, not kept).
const MAX_FRAMES: usize = 200_000;

/// One captured Ethernet frame.
#[derive(Debug, Clone)]
pub struct Frame(pub Vec<u8>);

/// An IP packet's transport: its protocol number and, for UDP and TCP, its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    pub protocol: u8,
    pub ports: Option<(u16, u16)>,
}

impl Frame {
    /// The Ethernet frame's type (`0x0800` IPv4, `0x86dd` IPv6, `0x0806` ARP).
    pub fn ethertype(&self) -> Option<u16> {
        self.0.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]))
    }

    /// The transport of an IPv4 or IPv6 frame (IPv6 without extension headers); `None`
    /// for other frames (ARP).
    pub fn transport(&self) -> Option<Transport> {
        let (protocol, l4) = match self.ethertype()? {
            0x0800 => {
                let ihl = usize::from(self.0.get(14)? & 0x0f) * 4;
                (*self.0.get(14 + 9)?, 14 + ihl)
            }
            0x86dd => (*self.0.get(14 + 6)?, 14 + 40),
            _ => return None,
        };
        let ports = match protocol {
            6 | 17 => self
                .0
                .get(l4..l4 + 4)
                .map(|p| (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]))),
            _ => None,
        };
        Some(Transport { protocol, ports })
    }

    /// Whether `needle` occurs anywhere in the frame.
    pub fn contains(&self, needle: &[u8]) -> bool {
        !needle.is_empty() && self.0.windows(needle.len()).any(|w| w == needle)
    }
}

/// A running capture; [`Capture::stop`] returns what it saw.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<std::io::Result<Vec<Frame>>>,
}

impl Capture {
    /// Starts capturing every frame on every interface of `ns` (a frame crossing a bridge
    /// is seen once per port it passes).
    pub fn start(ns: &NetNs) -> std::io::Result<Capture> {
        let socket: OwnedFd = ns
            .run(|| {
                let protocol = Protocol::from_raw(ETH_P_ALL_BE.try_into().expect("non-zero"));
                rustix::net::socket(AddressFamily::PACKET, SocketType::RAW, Some(protocol))
            })
            .map_err(std::io::Error::other)??;
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_millis(100)),
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut frames = Vec::new();
            let mut buf = vec![0u8; 65_536];
            loop {
                // Once told to stop, drain what the kernel queued before, without waiting:
                // a thread first scheduled after `stop` (a busy or emulated CPU) would
                // otherwise return nothing of frames that did cross.
                let stopping = flag.load(Ordering::SeqCst);
                let flags = if stopping { RecvFlags::DONTWAIT } else { RecvFlags::empty() };
                match rustix::net::recv(&socket, &mut buf[..], flags) {
                    Ok((n, _)) if frames.len() < MAX_FRAMES => frames.push(Frame(buf[..n].to_vec())),
                    Ok(_) => {}
                    Err(rustix::io::Errno::AGAIN) if stopping => return Ok(frames),
                    Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        });
        Ok(Capture { stop, thread })
    }

    /// Stops and returns the frames seen.
    pub fn stop(self) -> std::io::Result<Vec<Frame>> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("capture thread")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_udp(src_port: u16, dst_port: u16, payload: &[u8]) -> Frame {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend([10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend(src_port.to_be_bytes());
        f.extend(dst_port.to_be_bytes());
        f.extend([0, 0, 0, 0]);
        f.extend(payload);
        Frame(f)
    }

    /// A real capture sees a datagram sent on loopback in its namespace, whole.
    #[test]
    fn a_capture_sees_the_namespaces_traffic() {
        crate::ns::require_root();
        let ns = crate::ns::TestNetns::with_prefix("wgcap").unwrap();
        let capture = Capture::start(ns.netns()).unwrap();
        let server = crate::traffic::udp_echo_server(ns.netns(), "127.0.0.1:0".parse().unwrap()).unwrap();
        let marker = b"wg-capture-marker";
        crate::traffic::udp_echo(ns.netns(), server.local_addr(), marker, Duration::from_secs(2)).unwrap();
        let frames = capture.stop().unwrap();
        let port = server.local_addr().port();
        let seen: Vec<&Frame> = frames.iter().filter(|f| f.contains(marker)).collect();
        assert!(!seen.is_empty(), "{} frames, none with the marker", frames.len());
        assert!(seen.iter().all(|f| f
            .transport()
            .is_some_and(|t| t.protocol == 17 && t.ports.is_some_and(|(a, b)| a == port || b == port))));
    }

    #[test]
    fn frames_are_read_by_protocol_and_port() {
        let frame = ipv4_udp(51820, 4000, b"secret");
        assert_eq!(frame.transport(), Some(Transport { protocol: 17, ports: Some((51820, 4000)) }));
        assert!(frame.contains(b"secret") && !frame.contains(b"other"));
        assert_eq!(Frame(vec![0; 12].into_iter().chain([0x08, 0x06]).collect()).transport(), None);
        assert_eq!(Frame(vec![0; 13]).transport(), None, "short frames are not read past their end");
    }
}
