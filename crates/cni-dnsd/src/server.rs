//! The resolver process: the records (swapped whole on reload), one UDP and one TCP
//! listener per served address, the control socket.
//!
//! Bounds: at most [`Limits::forwards`] forwarded queries in flight (more are answered
//! SERVFAIL at once), at most [`Limits::tcp_connections`] TCP clients (more are closed), an
//! idle TCP client is dropped after [`TCP_IDLE`], and the records are bounded by the limits
//! in `cni_dns`.
//!
//! Who is answered: only a client of the network whose gateway it asked, that is a source
//! address in the network's subnets on a packet that arrived on the network's bridge
//! (`zone::NetworkZone::admits`). The gateway address is local, so Linux delivers packets
//! for it from every interface: a host's neighbour routed to the pod subnet, or a container
//! of another network, would otherwise have an open resolver. Anything else is dropped
//! without a word (a REFUSED would itself be a reply to a spoofed source) and counted.

use crate::answer::{handle, Outcome, Transport};
use crate::forward::{forward, HostServers};
use crate::metrics::{DnsMetrics, Source};
use crate::zone::{Refusal, Zones};
use cni_cli::tracing;
use cni_dns::StateDir;
use cni_os::socket;
use hickory_proto::op::{Message, ResponseCode};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How often blocked listener threads look at their stop flag.
const POLL: Duration = Duration::from_millis(250);
pub const TCP_IDLE: Duration = Duration::from_secs(5);
const TCP_QUERIES_PER_CONNECTION: usize = 256;

#[derive(Debug, Clone)]
pub struct Limits {
    pub forwards: usize,
    pub tcp_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { forwards: 256, tcp_connections: 64 }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub state: StateDir,
    pub resolv_conf: std::path::PathBuf,
    pub limits: Limits,
}

#[derive(Default)]
struct Counters {
    queries: AtomicU64,
    forwarded: AtomicU64,
    refused_busy: AtomicU64,
    /// Queries (and TCP clients) not answered because they were not the network's.
    refused_foreign: AtomicU64,
}

struct Listener {
    stop: Arc<AtomicBool>,
    /// The bridge's interface index the listener was made for: a re-created bridge has a
    /// new one, and the listener is made again (its TCP socket is bound to the old one).
    ifindex: u32,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

pub struct Resolver {
    settings: Settings,
    zones: RwLock<Arc<Zones>>,
    listeners: Mutex<HashMap<SocketAddr, Listener>>,
    /// One reload at a time: two overlapping ones (the rescan and a plugin's request) could
    /// otherwise install the older snapshot last and serve a record a DEL just removed.
    reloading: Mutex<()>,
    /// Addresses a listener failed on at the last reload, with the reason.
    listen_errors: Mutex<Vec<String>>,
    host_servers: HostServers,
    forwards: AtomicUsize,
    tcp_connections: AtomicUsize,
    counters: Counters,
    /// Always counted; served with `--metrics-address`.
    pub metrics: DnsMetrics,
}

impl Resolver {
    pub fn new(settings: Settings) -> Arc<Resolver> {
        Arc::new(Resolver {
            host_servers: HostServers::new(&settings.resolv_conf),
            settings,
            zones: RwLock::new(Arc::new(Zones::default())),
            listeners: Mutex::new(HashMap::new()),
            reloading: Mutex::new(()),
            listen_errors: Mutex::new(Vec::new()),
            forwards: AtomicUsize::new(0),
            tcp_connections: AtomicUsize::new(0),
            counters: Counters::default(),
            metrics: DnsMetrics::default(),
        })
    }

    fn zones(&self) -> Arc<Zones> {
        self.zones.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the state directory again and starts or stops listeners to match. Returns a
    /// one-line summary; problems are logged.
    pub fn reload(self: &Arc<Resolver>) -> String {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let zones = Arc::new(Zones::load(&self.settings.state));
        for problem in &zones.problems {
            tracing::warn!(problem = %problem, "skipped a record");
        }
        *self.zones.write().unwrap_or_else(|p| p.into_inner()) = zones.clone();
        self.metrics.loaded(zones.networks.len(), zones.attachment_count());
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let wanted: HashMap<SocketAddr, &Arc<crate::zone::NetworkZone>> = zones
            .by_address
            .iter()
            .map(|(address, zone)| (SocketAddr::new(*address, zone.port), zone))
            .collect();
        listeners.retain(|address, listener| {
            let keep = wanted.get(address).is_some_and(|zone| zone.ifindex == listener.ifindex);
            if !keep {
                tracing::info!(address = %address, "stopped answering");
            }
            keep
        });
        let mut errors = Vec::new();
        for (address, zone) in &wanted {
            if listeners.contains_key(address) {
                continue;
            }
            match self.listen(*address, zone) {
                Ok(listener) => {
                    tracing::info!(address = %address, network = %zone.network, "answering");
                    listeners.insert(*address, listener);
                }
                Err(e) => {
                    tracing::warn!(address = %address, network = %zone.network, error = %e, "cannot answer");
                    errors.push(format!("{address}: {e}"));
                }
            }
        }
        let summary = format!(
            "networks={} attachments={} listening={} problems={}",
            zones.networks.len(),
            zones.attachment_count(),
            listeners.len(),
            zones.problems.len() + errors.len()
        );
        *self.listen_errors.lock().unwrap_or_else(|p| p.into_inner()) = errors;
        summary
    }

    fn listen(
        self: &Arc<Resolver>,
        addr: SocketAddr,
        zone: &crate::zone::NetworkZone,
    ) -> std::io::Result<Listener> {
        let bridge = match (&zone.interface, zone.ifindex) {
            (Some(name), index) if index != 0 => name.clone(),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the network's bridge is not known or does not exist: nobody could be answered",
                ))
            }
        };
        let udp = crate::sockets::udp(addr)?;
        // A listener of this address stopped by an earlier reload (its network's last
        // container went, and one came back at once) closes within one POLL: wait for it.
        let mut attempts = 0;
        let tcp = loop {
            match crate::sockets::tcp(addr, &bridge, 64) {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 20 => {
                    attempts += 1;
                    std::thread::sleep(POLL / 10);
                }
                other => break other?,
            }
        };
        udp.set_read_timeout(Some(POLL))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (me, flag) = (self.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("udp {addr}"))
            .spawn(move || me.serve_udp(udp, addr.ip(), &flag))?;
        let (me, flag) = (self.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("tcp {addr}"))
            .spawn(move || me.serve_tcp(tcp, addr.ip(), &flag))?;
        Ok(Listener { stop, ifindex: zone.ifindex })
    }

    /// The upstream servers for a network: its own, or the host's.
    fn upstreams(&self, own: &[SocketAddr]) -> Vec<SocketAddr> {
        if own.is_empty() {
            self.host_servers.get()
        } else {
            own.to_vec()
        }
    }

    /// Answers one query that arrived on `local`; `None` means say nothing.
    fn respond(&self, local: IpAddr, bytes: &[u8], transport: Transport) -> Option<Vec<u8>> {
        self.counters.queries.fetch_add(1, Ordering::Relaxed);
        let zones = self.zones();
        let zone = zones.by_address.get(&local)?;
        let (source, reply) = match handle(zone, bytes, transport) {
            Outcome::Reply(reply) => (Source::Local, Some(reply)),
            Outcome::Drop => (Source::Local, None),
            Outcome::Forward(query) => {
                (Source::Upstream, Some(self.forward_bounded(&query, &zone.upstreams, &zones, transport)))
            }
        };
        self.metrics.query(bytes, source, reply.as_deref());
        reply
    }

    /// For `/healthz`: whether the resolver answers on every address its records name.
    pub fn health(&self) -> Result<String, String> {
        let errors = self.listen_errors.lock().unwrap_or_else(|p| p.into_inner());
        let listening = self.listeners.lock().unwrap_or_else(|p| p.into_inner()).len();
        match errors.first() {
            None => Ok(format!("answering on {listening} addresses")),
            Some(first) => Err(format!("cannot answer on {} addresses, {first}", errors.len())),
        }
    }

    /// Takes one of the forwarding slots; false (and counted) when all are in use.
    fn reserve_forward(&self) -> bool {
        if self.forwards.fetch_add(1, Ordering::SeqCst) >= self.settings.limits.forwards {
            self.forwards.fetch_sub(1, Ordering::SeqCst);
            self.counters.refused_busy.fetch_add(1, Ordering::Relaxed);
            self.metrics.busy();
            return false;
        }
        true
    }

    /// Forwards with a slot already reserved, and gives the slot back.
    fn forward_reserved(
        &self,
        query: &Message,
        own: &[SocketAddr],
        zones: &Zones,
        transport: Transport,
    ) -> Vec<u8> {
        self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
        let ours: HashSet<IpAddr> = zones.by_address.keys().copied().collect();
        let started = Instant::now();
        let reply = forward(query, &self.upstreams(own), &ours, transport);
        self.metrics.forwarded(started.elapsed());
        self.forwards.fetch_sub(1, Ordering::SeqCst);
        reply
    }

    fn forward_bounded(
        &self,
        query: &Message,
        own: &[SocketAddr],
        zones: &Zones,
        transport: Transport,
    ) -> Vec<u8> {
        if !self.reserve_forward() {
            return crate::answer::encode_error(query, ResponseCode::ServFail);
        }
        self.forward_reserved(query, own, zones, transport)
    }

    /// Counts a query or client that was not answered because it is not the network's.
    fn refuse(&self, transport: Transport, why: Refusal) {
        self.counters.refused_foreign.fetch_add(1, Ordering::Relaxed);
        self.metrics.refused(transport, why);
    }

    fn serve_udp(self: Arc<Resolver>, socket: UdpSocket, local: IpAddr, stop: &AtomicBool) {
        let socket = Arc::new(socket);
        let mut buf = vec![0u8; 65535];
        while !stop.load(Ordering::SeqCst) {
            let (n, peer, interface) = match cni_os::inet::recv_with_interface(&*socket, &mut buf) {
                Ok(r) => (r.len, r.peer, r.interface),
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(e) => {
                    tracing::warn!(address = %local, error = %e, "receiving a UDP query failed");
                    std::thread::sleep(POLL);
                    continue;
                }
            };
            let zones = self.zones();
            let Some(zone) = zones.by_address.get(&local) else { continue };
            if let Err(why) = zone.admits(peer.ip(), interface) {
                self.refuse(Transport::Udp, why);
                continue;
            }
            let bytes = &buf[..n];
            // Local answers are cheap and answered here (sent before they are counted: the
            // client is waiting); a forward waits on the network, so it gets its own thread
            // (bounded by the forward limit) and the listener moves on.
            match handle(zone, bytes, Transport::Udp) {
                Outcome::Reply(reply) => {
                    let _ = socket.send_to(&reply, peer);
                    self.counters.queries.fetch_add(1, Ordering::Relaxed);
                    self.metrics.query(bytes, Source::Local, Some(&reply));
                }
                Outcome::Drop => self.metrics.query(bytes, Source::Local, None),
                Outcome::Forward(query) => {
                    let bytes = bytes.to_vec();
                    self.counters.queries.fetch_add(1, Ordering::Relaxed);
                    // The slot is taken before the thread exists, so a flood makes SERVFAILs,
                    // not threads.
                    if !self.reserve_forward() {
                        let servfail = crate::answer::encode_error(&query, ResponseCode::ServFail);
                        self.metrics.query(&bytes, Source::Upstream, Some(&servfail));
                        let _ = socket.send_to(&servfail, peer);
                        continue;
                    }
                    let (me, socket, zones) = (self.clone(), socket.clone(), zones.clone());
                    let own = zone.upstreams.clone();
                    let spawned = std::thread::Builder::new().name("forward".into()).spawn(move || {
                        let reply = me.forward_reserved(&query, &own, &zones, Transport::Udp);
                        me.metrics.query(&bytes, Source::Upstream, Some(&reply));
                        let _ = socket.send_to(&reply, peer);
                    });
                    if let Err(e) = spawned {
                        self.forwards.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!(error = %e, "cannot start a forwarding thread");
                    }
                }
            }
        }
    }

    fn serve_tcp(self: Arc<Resolver>, listener: TcpListener, local: IpAddr, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            if !readable(&listener, POLL) {
                continue;
            }
            let Ok((stream, peer)) = listener.accept() else { continue };
            // The listener takes connections from the bridge only (SO_BINDTODEVICE); the
            // source must be the network's too.
            let zones = self.zones();
            let admitted = match zones.by_address.get(&local) {
                Some(zone) => zone.admits(peer.ip(), zone.ifindex),
                None => Err(Refusal::Interface),
            };
            if let Err(why) = admitted {
                self.refuse(Transport::Tcp, why);
                continue; // closed at once, nothing read
            }
            if self.tcp_connections.fetch_add(1, Ordering::SeqCst) >= self.settings.limits.tcp_connections {
                self.tcp_connections.fetch_sub(1, Ordering::SeqCst);
                self.counters.refused_busy.fetch_add(1, Ordering::Relaxed);
                self.metrics.busy();
                continue; // dropped: closed at once
            }
            let me = self.clone();
            let spawned = std::thread::Builder::new().name("tcp client".into()).spawn(move || {
                let _ = me.serve_tcp_client(stream, local);
                me.tcp_connections.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                self.tcp_connections.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn serve_tcp_client(&self, mut stream: TcpStream, local: IpAddr) -> std::io::Result<()> {
        stream.set_read_timeout(Some(TCP_IDLE))?;
        stream.set_write_timeout(Some(TCP_IDLE))?;
        for _ in 0..TCP_QUERIES_PER_CONNECTION {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len)?;
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            stream.read_exact(&mut query)?;
            let Some(reply) = self.respond(local, &query, Transport::Tcp) else { return Ok(()) };
            let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&reply);
            stream.write_all(&framed)?;
        }
        Ok(())
    }

    /// `status` for the control socket and the plugin's STATUS.
    pub fn status(&self) -> String {
        let zones = self.zones();
        let listening = self.listeners.lock().unwrap_or_else(|p| p.into_inner()).len();
        let errors = self.listen_errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut line = format!(
            "pid={} networks={} attachments={} listening={} queries={} forwarded={} busy={} refused={} problems={}",
            std::process::id(),
            zones.networks.len(),
            zones.attachment_count(),
            listening,
            self.counters.queries.load(Ordering::Relaxed),
            self.counters.forwarded.load(Ordering::Relaxed),
            self.counters.refused_busy.load(Ordering::Relaxed),
            self.counters.refused_foreign.load(Ordering::Relaxed),
            zones.problems.len() + errors.len(),
        );
        if let Some(first) = errors.first() {
            cni_dns::control::push_listen_error(&mut line, first);
        }
        line
    }

    /// `lookup <network> <name>`: the addresses served for the name, space separated.
    fn lookup(&self, network: &str, name: &str) -> String {
        let zones = self.zones();
        let Some(zone) = zones.networks.get(network) else { return String::new() };
        match zone.lookup(name) {
            crate::zone::Lookup::Found(addresses) => {
                addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
            }
            _ => String::new(),
        }
    }

    fn control_request(self: &Arc<Resolver>, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["reload"] => format!("ok {}", self.reload()),
            ["status"] => format!("ok {}", self.status()),
            ["lookup", network, name] => format!("ok {}", self.lookup(network, name)),
            _ => "error unknown request".to_string(),
        }
    }

    /// Serves the control socket through the workspace's root-only request server
    /// (`cni_os::socket`): one line per connection, a 2 s deadline for it, a few
    /// connections at once (reloads take turns on their own lock).
    pub fn serve_control(self: &Arc<Resolver>, listener: UnixListener) -> std::io::Result<()> {
        let limits = socket::Limits { deadline: CONTROL_DEADLINE, max_connections: 8, ..Default::default() };
        socket::Server::new(listener, socket::Framing::Line, "control")
            .with_limits(limits)
            .serve(Arc::new(Control(self.clone())))
    }
}

/// The time a control client has to send its line (and to take the answer).
const CONTROL_DEADLINE: Duration = Duration::from_secs(2);

/// The control protocol as the request server sees it: a line in, a line out.
struct Control(Arc<Resolver>);

impl socket::Service for Control {
    fn handle(&self, request: Vec<u8>) -> Vec<u8> {
        let reply = match std::str::from_utf8(&request) {
            Ok(line) => self.0.control_request(line.trim()),
            Err(_) => "error request is not UTF-8".to_string(),
        };
        format!("{reply}\n").into_bytes()
    }

    fn refuse(&self, why: &socket::Refusal) -> Option<Vec<u8>> {
        if let socket::Refusal::Io(_) = why {
            return None;
        }
        tracing::warn!(reason = %why, "control socket: refused a request");
        Some(format!("error {why}\n").into_bytes())
    }
}

/// Waits up to `timeout` for `fd` to become readable.
fn readable(fd: impl std::os::fd::AsFd, timeout: Duration) -> bool {
    cni_os::poll::readable(fd, timeout).unwrap_or(false)
}
