//! Forwarding what is not ours: to the network's own upstream servers, or else to the
//! host's resolv.conf servers (re-read when the file changes). Each query goes upstream
//! with a fresh random id; a reply counts only if it parses, is a response with that id
//! and asks our question (RFC 5452), and it is re-encoded before it reaches the container,
//! so nothing upstream sends passes through unchecked. A truncated UDP reply is retried over
//! TCP when the client asked over TCP; over UDP the client gets TC and comes back over TCP.

use crate::answer::{encode_error, Transport};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long one upstream server gets before the next is tried.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_MESSAGE: usize = 65535;

/// The host's servers from resolv.conf, cached by the file's modification time.
pub struct HostServers {
    path: PathBuf,
    cached: Mutex<(Option<FileStamp>, Vec<SocketAddr>)>,
}

/// A file's modification time and size: when either changes, it is read again.
type FileStamp = (SystemTime, u64);

impl HostServers {
    pub fn new(path: impl Into<PathBuf>) -> HostServers {
        HostServers { path: path.into(), cached: Mutex::new((None, Vec::new())) }
    }

    /// The servers now: the file is looked at (one stat) on every call and parsed again
    /// only when its time or size changed.
    pub fn get(&self) -> Vec<SocketAddr> {
        let stamp = std::fs::metadata(&self.path).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0 != stamp || stamp.is_none() {
            cached.1 = parse_resolv_conf(&self.path);
            cached.0 = stamp;
        }
        cached.1.clone()
    }
}

/// `nameserver` lines of a resolv.conf (at most [`cni_dns::MAX_UPSTREAMS`]), port 53.
pub fn parse_resolv_conf(path: &Path) -> Vec<SocketAddr> {
    let text =
        std::fs::read(path).map(|b| b.into_iter().take(64 * 1024).collect::<Vec<u8>>()).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        // A scoped IPv6 address (fe80::1%eth0) names an interface we cannot use from here.
        .filter_map(|addr| addr.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .take(cni_dns::MAX_UPSTREAMS)
        .collect()
}

fn random_id() -> u16 {
    // Unpredictable ids guard against spoofed replies; without the kernel's randomness a
    // clock-derived id still tells our queries apart.
    cni_os::random::u16()
        .unwrap_or_else(|_| (Instant::now().elapsed().subsec_nanos() as u16) ^ (std::process::id() as u16))
}

/// Whether `reply` answers `sent` (id, QR, and the same question, names compared without
/// case).
fn answers(sent: &Message, reply: &Message) -> bool {
    reply.id() == sent.id()
        && reply.message_type() == MessageType::Response
        && reply.queries().len() == sent.queries().len()
        && reply.queries().iter().zip(sent.queries()).all(|(a, b)| {
            a.query_type() == b.query_type()
                && a.query_class() == b.query_class()
                && a.name().to_lowercase() == b.name().to_lowercase()
        })
}

fn ask_udp(server: SocketAddr, sent: &Message, bytes: &[u8]) -> std::io::Result<Message> {
    let local: SocketAddr =
        if server.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let socket = UdpSocket::bind(local)?;
    socket.connect(server)?;
    socket.send(bytes)?;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        socket.set_read_timeout(Some(left))?;
        let n = socket.recv(&mut buf)?;
        // Anything else (a spoofed or late datagram) is ignored and we keep waiting.
        if let Ok(reply) = Message::from_vec(&buf[..n]) {
            if answers(sent, &reply) {
                return Ok(reply);
            }
        }
    }
}

fn ask_tcp(server: SocketAddr, sent: &Message, bytes: &[u8]) -> std::io::Result<Message> {
    let mut stream = TcpStream::connect_timeout(&server, UPSTREAM_TIMEOUT)?;
    stream.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
    stream.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf)?;
    let reply =
        Message::from_vec(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if !answers(sent, &reply) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "reply does not match the query"));
    }
    Ok(reply)
}

/// Whether `server` is one of our own listening addresses, however it is spelt: an
/// IPv4-mapped IPv6 address (`::ffff:10.89.0.1`) reaches the IPv4 gateway too.
fn is_own(server: IpAddr, own: &HashSet<IpAddr>) -> bool {
    own.contains(&server) || own.contains(&server.to_canonical())
}

/// Asks `servers` in order and returns the reply for the client (its id restored), or
/// SERVFAIL when none answered. Servers in `own` (our listening addresses) are skipped so a
/// resolv.conf that points at a gateway cannot make us ask ourselves forever; a spelling
/// this misses still ends at once: a query the host sends to a gateway comes from that
/// gateway's own address, which no container has, and is never answered (see `zone`).
pub fn forward(
    query: &Message,
    servers: &[SocketAddr],
    own: &HashSet<IpAddr>,
    transport: Transport,
) -> Vec<u8> {
    let mut sent = query.clone();
    sent.set_id(random_id());
    let Ok(bytes) = sent.to_vec() else { return encode_error(query, ResponseCode::FormErr) };
    for server in servers.iter().filter(|s| !is_own(s.ip(), own)) {
        let reply = match transport {
            Transport::Udp => ask_udp(*server, &sent, &bytes),
            Transport::Tcp => match ask_udp(*server, &sent, &bytes) {
                Ok(r) if r.truncated() => ask_tcp(*server, &sent, &bytes),
                other => other.or_else(|_| ask_tcp(*server, &sent, &bytes)),
            },
        };
        if let Ok(mut reply) = reply {
            reply.set_id(query.id());
            if let Ok(out) = reply.to_vec() {
                if transport == Transport::Tcp || out.len() <= crate::answer::udp_limit(query) {
                    return out;
                }
                // More than the client may get over UDP: let it use TCP.
                return crate::answer::encode(query, &reply, Transport::Udp);
            }
        }
    }
    encode_error(query, ResponseCode::ServFail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_addresses_are_recognised_in_every_spelling() {
        let own: HashSet<IpAddr> = ["10.89.0.1".parse().unwrap(), "fd89::1".parse().unwrap()].into();
        for ours in ["10.89.0.1", "::ffff:10.89.0.1", "fd89::1"] {
            assert!(is_own(ours.parse().unwrap(), &own), "{ours}");
        }
        for other in ["10.89.0.2", "::ffff:10.89.0.2", "::10.89.0.1", "127.0.0.1"] {
            assert!(!is_own(other.parse().unwrap(), &own), "{other}");
        }
    }

    #[test]
    fn resolv_conf_nameservers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "# c\nsearch x\nnameserver 10.9.0.1\nnameserver fd00::53\nnameserver fe80::1%eth0\noptions ndots:2\n").unwrap();
        let servers = HostServers::new(&path);
        assert_eq!(servers.get(), ["10.9.0.1:53".parse().unwrap(), "[fd00::53]:53".parse().unwrap()]);
        std::fs::write(&path, "nameserver 10.9.0.2\n").unwrap();
        assert_eq!(servers.get(), ["10.9.0.2:53".parse::<SocketAddr>().unwrap()]);
    }
}
