//! The DHCPv4 client exchanges (RFC 2131 section 3-4): DISCOVER/OFFER/REQUEST/ACK, renewal
//! (unicast to the server), rebinding (broadcast), release.
//!
//! It talks through a UDP socket on port 68 created inside the container's namespace and
//! bound to the container interface (SO_BINDTODEVICE): a socket stays in the namespace it
//! was made in, so only its creation needs the thread in there ([`NetNs::run`] moves it in
//! and back); every exchange then runs from the daemon's own thread. Before the interface
//! has an address the kernel would drop a reply unicast to the offered address, so requests
//! in INIT always set the broadcast flag (servers then broadcast the reply); renewals come
//! from the leased address, which the interface has by then, and are answered by unicast.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use cni_cli::tracing::debug;
use cni_net::netlink::LinkCondition;
use cni_net::{NetNs, Netlink};

use super::lease::{unix_now, Lease};
use super::options::{self as opt, MessageType};
use super::wire::{Message, BOOTREPLY, FLAG_BROADCAST};

const CLIENT_PORT: u16 = 68;
const SERVER_PORT: u16 = 67;
/// The first retransmission comes after this; each next one after twice the last, up to
/// `resend_max` (RFC 2131 4.1 starts at 4 s, which alone would eat most of a runtime's
/// patience on a lossy first packet while the bridge port comes up).
pub(super) const FIRST_RESEND: Duration = Duration::from_secs(1);

/// What a client sends about itself, fixed for the lifetime of an attachment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientParams {
    /// Option 61, stable per attachment so a server hands the same address back.
    pub client_id: Vec<u8>,
    /// Options to send as they are (`provide` in the configuration; 12 is the hostname).
    pub provide: Vec<(u8, Vec<u8>)>,
    /// Option 55.
    pub request: Vec<u8>,
    /// DHCPv6 only (where `client_id` is the DUID): the prefix length leases get, /128
    /// when unset (DHCPv6 carries none; see [`super::lease6`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_len: Option<u8>,
}

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Upper bound for one whole exchange (acquisition, renewal attempt, release).
    pub timeout: Duration,
    pub resend_max: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no answer from a DHCP server within {0:?}")]
    Timeout(Duration),
    #[error("the server refused (DHCPNAK){}", .0.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Nak(Option<String>),
    /// A DHCPv6 server's refusal (a status such as NoBinding or NoAddrsAvail).
    #[error("the server refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Net(#[from] cni_net::Error),
}

/// A client socket on one interface of one namespace.
pub struct Client {
    socket: UdpSocket,
    mac: [u8; 6],
    params: ClientParams,
    timing: Timing,
}

/// Creates the socket inside `ns`, bound to `ifname` on port 68.
fn bound_socket(ns: &NetNs, ifname: &str) -> Result<UdpSocket, ClientError> {
    use cni_os::inet;
    let socket = ns.run(|| -> io::Result<UdpSocket> {
        let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, CLIENT_PORT));
        let fd = inet::socket_for(&addr, inet::Kind::Datagram)?;
        // Several interfaces of one namespace may each run a client on port 68.
        inet::set_socket_reuseaddr(&fd, true)?;
        inet::bind_to_device(&fd, ifname)?;
        inet::bind(&fd, &addr)?;
        let socket = UdpSocket::from(fd);
        socket.set_broadcast(true)?;
        Ok(socket)
    })??;
    Ok(socket)
}

/// A random transaction id (RFC 2131: chosen by the client, random).
pub(super) fn random_xid() -> u32 {
    // Unpredictability only guards against spoofing on the container's link; should the
    // kernel refuse randomness, a clock-derived id still tells our transactions apart.
    cni_os::random::u32().unwrap_or_else(|_| unix_now() as u32 ^ std::process::id())
}

impl Client {
    /// Opens a client on `ifname` in `ns`: brings the link up if it is down and waits
    /// (bounded) until it is operationally up, so the first DISCOVER is not lost to a port
    /// coming up. Carrier alone is not enough: a veth has carrier at once but drops what it
    /// sends until the link watcher runs, which under load costs a 1 s retransmission.
    pub fn open(
        ns: &NetNs,
        ifname: &str,
        params: ClientParams,
        timing: Timing,
    ) -> Result<Client, ClientError> {
        let mut netlink = Netlink::in_ns(ns)?;
        let link = netlink.require_link(ifname)?;
        let mac = link
            .mac
            .map(|m| m.octets())
            .ok_or_else(|| io::Error::other(format!("{ifname} has no Ethernet address")))?;
        netlink.set_link_up(link.index)?;
        // No carrier yet only costs a retransmission: not an error.
        let _ = netlink.wait_for_link(
            link.index,
            LinkCondition::Running,
            timing.timeout.min(Duration::from_secs(3)),
        );
        Ok(Client { socket: bound_socket(ns, ifname)?, mac, params, timing })
    }

    fn message(&self, kind: MessageType, xid: u32) -> Message {
        let mut m = Message::request(xid, self.mac);
        m.set_option(opt::MESSAGE_TYPE, vec![kind as u8]);
        m.set_option(opt::CLIENT_ID, self.params.client_id.clone());
        if kind != MessageType::Release {
            for (code, value) in &self.params.provide {
                m.set_option(*code, value.clone());
            }
            m.set_option(opt::PARAMETER_REQUEST_LIST, self.params.request.clone());
        }
        m
    }

    /// Sends `msg` to `dest` and retransmits with backoff until `accept` takes a reply or
    /// `limit` passes. Replies that do not decode, are not for us, or are not accepted are
    /// dropped.
    fn transact(
        &self,
        msg: &mut Message,
        dest: Ipv4Addr,
        limit: Duration,
        accept: &mut dyn FnMut(&Message) -> bool,
    ) -> Result<Message, ClientError> {
        let (mac, xid) = (self.mac, msg.xid);
        retransmit(
            &self.socket,
            limit,
            self.timing.resend_max,
            &mut |elapsed| {
                msg.secs = elapsed.as_secs().min(u64::from(u16::MAX)) as u16;
                self.socket.send_to(&msg.encode(), SocketAddrV4::new(dest, SERVER_PORT)).map(drop)
            },
            &mut |bytes| {
                let reply = Message::decode(bytes).ok()?;
                if reply.op != BOOTREPLY || reply.xid != xid || reply.chaddr[..6] != mac {
                    return None;
                }
                if reply_type(&reply) == Some(MessageType::Nak) {
                    return Some(Err(ClientError::Nak(reply.option(opt::MESSAGE).and_then(opt::text))));
                }
                accept(&reply).then_some(Ok(reply))
            },
        )
    }

    /// INIT: DISCOVER, take the first usable OFFER, REQUEST it, wait for the ACK.
    /// `previous` is asked for again (option 50) when set. A NAK to the REQUEST starts
    /// over (RFC 2131 3.1 step 4): with two clients discovering at once, a server may
    /// offer both the same address and refuse the second REQUEST.
    pub fn acquire(&self, previous: Option<Ipv4Addr>) -> Result<Lease, ClientError> {
        let deadline = Instant::now() + self.timing.timeout;
        let mut wanted = previous;
        loop {
            match self.discover_and_request(wanted, deadline) {
                Err(ClientError::Nak(msg)) if Instant::now() + FIRST_RESEND < deadline => {
                    debug!(server_message = ?msg, "DHCPNAK while acquiring; starting over");
                    wanted = None;
                }
                Err(ClientError::Timeout(_)) => return Err(ClientError::Timeout(self.timing.timeout)),
                other => return other,
            }
        }
    }

    fn discover_and_request(
        &self,
        wanted: Option<Ipv4Addr>,
        deadline: Instant,
    ) -> Result<Lease, ClientError> {
        let xid = random_xid();
        let mut discover = self.message(MessageType::Discover, xid);
        discover.flags = FLAG_BROADCAST;
        if let Some(addr) = wanted {
            discover.set_option(opt::REQUESTED_IP, addr.octets().to_vec());
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let offer = self.transact(&mut discover, Ipv4Addr::BROADCAST, remaining, &mut |m| {
            reply_type(m) == Some(MessageType::Offer)
                && !m.yiaddr.is_unspecified()
                && m.option(opt::SERVER_ID).and_then(opt::ipv4).is_some()
        })?;
        let server = offer.option(opt::SERVER_ID).and_then(opt::ipv4).unwrap_or(Ipv4Addr::UNSPECIFIED);
        let mut request = self.message(MessageType::Request, xid);
        request.flags = FLAG_BROADCAST;
        request.set_option(opt::REQUESTED_IP, offer.yiaddr.octets().to_vec());
        request.set_option(opt::SERVER_ID, server.octets().to_vec());
        let sent_at = unix_now();
        let remaining = deadline.saturating_duration_since(Instant::now()).max(FIRST_RESEND);
        let ack = self.transact(&mut request, Ipv4Addr::BROADCAST, remaining, &mut |m| {
            reply_type(m) == Some(MessageType::Ack)
                && m.yiaddr == offer.yiaddr
                && Lease::from_ack(m, 0).is_some()
        })?;
        Ok(Lease::from_ack(&ack, sent_at).expect("accepted only if it makes a lease"))
    }

    /// RENEWING (unicast to the lease's server) or REBINDING (broadcast to any server):
    /// a REQUEST from the leased address; the ACK extends the lease.
    pub fn extend(&self, lease: &Lease, rebind: bool, limit: Duration) -> Result<Lease, ClientError> {
        let mut request = self.message(MessageType::Request, random_xid());
        request.ciaddr = lease.address.addr();
        let dest = if rebind { Ipv4Addr::BROADCAST } else { lease.server_id };
        let sent_at = unix_now();
        let ack = self.transact(&mut request, dest, limit, &mut |m| {
            reply_type(m) == Some(MessageType::Ack)
                && m.yiaddr == lease.address.addr()
                && Lease::from_ack(m, 0).is_some()
        })?;
        Ok(Lease::from_ack(&ack, sent_at).expect("accepted only if it makes a lease"))
    }

    /// DHCPRELEASE, sent once (the server does not answer): unicast to the server, or
    /// broadcast when the unicast cannot leave (no route to the server any more).
    pub fn release(&self, lease: &Lease) -> Result<(), ClientError> {
        let mut release = self.message(MessageType::Release, random_xid());
        release.ciaddr = lease.address.addr();
        release.set_option(opt::SERVER_ID, lease.server_id.octets().to_vec());
        let bytes = release.encode();
        if self.socket.send_to(&bytes, SocketAddrV4::new(lease.server_id, SERVER_PORT)).is_err() {
            self.socket.send_to(&bytes, SocketAddrV4::new(Ipv4Addr::BROADCAST, SERVER_PORT))?;
        }
        Ok(())
    }
}

/// What [`retransmit`] makes of a received datagram: `None` to drop it, or the outcome.
pub(super) type Verdict<T> = Option<Result<T, ClientError>>;

/// One client exchange on `socket`, for v4 and v6 alike: `send` (given the time since the
/// first send) goes out at once and again with doubling gaps from [`FIRST_RESEND`] up to
/// `resend_max`, until `accept` decides on a received datagram (`None` drops it: garbage,
/// another transaction's) or `limit` passes. A send that fails (no address yet, link
/// down) is only logged: the next retransmission may pass.
pub(super) fn retransmit<T>(
    socket: &UdpSocket,
    limit: Duration,
    resend_max: Duration,
    send: &mut dyn FnMut(Duration) -> io::Result<()>,
    accept: &mut dyn FnMut(&[u8]) -> Verdict<T>,
) -> Result<T, ClientError> {
    let start = Instant::now();
    let deadline = start + limit;
    let mut resend = FIRST_RESEND;
    // The largest UDP payload: a longer datagram would arrive cut short and look valid.
    let mut buf = vec![0u8; 65536];
    loop {
        if let Err(e) = send(start.elapsed()) {
            debug!(error = %e, "sending a DHCP message failed; will retransmit");
        }
        let next_send = (Instant::now() + resend).min(deadline);
        resend = (resend * 2).min(resend_max.max(FIRST_RESEND));
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout(limit));
            }
            if now >= next_send {
                break;
            }
            socket.set_read_timeout(Some(next_send - now))?;
            let len = match socket.recv(&mut buf) {
                Ok(len) => len,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(outcome) = accept(&buf[..len]) {
                return outcome;
            }
        }
    }
}

fn reply_type(m: &Message) -> Option<MessageType> {
    m.option(opt::MESSAGE_TYPE).and_then(|v| v.first().copied()).and_then(MessageType::from_byte)
}
