//! The endpoint a Prometheus server scrapes: `GET /metrics` and `GET /healthz` over plain
//! HTTP/1.1 on a TCP address, one request per connection.
//!
//! Anyone who can reach the address can send it anything, so every limit holds whatever
//! the client does, and nothing a client does reaches the daemon's own work (which runs on
//! other threads and only ever touches the metrics' atomics):
//!
//! - **How much**: the request head (request line and headers) is at most
//!   [`MAX_REQUEST_HEAD`] bytes; a longer one is answered 431 (and at most 64 KiB more of
//!   it read and dropped, so the answer is not lost to a reset). A body is never read.
//! - **How long**: one deadline ([`DEADLINE`]) for the whole head from the moment the
//!   connection is taken up, not a timeout per read, so a client trickling a byte at a time
//!   is cut; writing the answer has the same allowance.
//! - **How many**: one thread serves every connection, polling them all (nonblocking
//!   sockets, `poll(2)`), so no client waits behind another: a request that has arrived is
//!   answered in the same turn of the loop however many idle or trickling clients are
//!   open. At most [`MAX_CONNECTIONS`] are held; when one more arrives, the oldest is
//!   closed to make room (a flood of idle clients sheds its own oldest, a fresh probe is
//!   served). Threads (one), descriptors and memory (a head buffer and an answer per held
//!   connection) are thus fixed whatever the number of clients, and a liveness probe is
//!   not starved by clients that hold connections open.
//! - **What**: `GET` (and `HEAD`) of the two paths; any other path is 404, any other
//!   method 405, anything that is not HTTP 400.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

/// The largest request head taken: a scraper's is a few hundred bytes.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;
/// The time a client has to send its request head, and again to take the answer.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Connections held at once; one more closes the oldest. A scraper and a probe hold one
/// each for a moment: the rest is room for clients that hold theirs open.
pub const MAX_CONNECTIONS: usize = 128;

/// The bounds of an endpoint ([`DEADLINE`], [`MAX_CONNECTIONS`] in the daemons).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { deadline: DEADLINE, connections: MAX_CONNECTIONS }
    }
}

/// What the endpoint serves: the exposition text, and whether the daemon can do its work.
pub trait Source: Send + Sync + 'static {
    /// The metrics in the exposition format.
    fn metrics(&self) -> String;
    /// `Ok` with a line of detail when the daemon can do its work, `Err` saying why not.
    fn health(&self) -> Result<String, String>;
}

/// The content type of [`Source::metrics`]: the OpenMetrics text prometheus-client writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `address` and serves `source` on a background thread; returns the bound address
/// (the port chosen when `address` had port 0). Binding errors come back at once, so a
/// daemon started with a bad address fails at start rather than run without its metrics.
pub fn serve(address: SocketAddr, source: Arc<dyn Source>) -> io::Result<SocketAddr> {
    serve_with(address, source, Limits::default())
}

/// [`serve`] with other bounds (tests use a short deadline).
pub fn serve_with(address: SocketAddr, source: Arc<dyn Source>, limits: Limits) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let limits = Limits { connections: limits.connections.max(1), ..limits };
    std::thread::Builder::new()
        .name("metrics http".into())
        .spawn(move || Server { listener, source, limits, conns: Vec::new() }.run())?;
    Ok(bound)
}

/// The one thread's state: the listener and every connection it holds.
struct Server {
    listener: TcpListener,
    source: Arc<dyn Source>,
    limits: Limits,
    conns: Vec<Conn>,
}

/// Where a connection stands.
enum Stage {
    /// Taking the request head (at most [`MAX_REQUEST_HEAD`] bytes).
    Reading(Vec<u8>),
    /// Sending the answer from `sent` on; `then_drain` after a 431 (see [`Stage::Draining`]).
    Writing { out: Vec<u8>, sent: usize, then_drain: bool },
    /// Closing with unread data resets the connection, which can destroy the answer
    /// before the client reads it: this much more is taken (and dropped) first.
    Draining(u64),
}

struct Conn {
    stream: TcpStream,
    /// When this stage's allowance ends (the head's, then the answer's).
    deadline: Instant,
    stage: Stage,
    /// What the last poll found (a new connection is tried at once: a request already
    /// sent is served in the turn that accepts it).
    ready: PollFlags,
}

/// What one turn did to a connection.
enum Next {
    Keep,
    Close,
}

impl Server {
    fn run(mut self) {
        loop {
            let listener_ready = self.wait();
            let now = Instant::now();
            if listener_ready {
                self.accept(now);
            }
            let source = &*self.source;
            let allowance = self.limits.deadline;
            self.conns.retain_mut(|conn| {
                let next = if conn.deadline <= now {
                    Next::Close
                } else if conn.ready.is_empty() {
                    Next::Keep
                } else {
                    conn.progress(source, allowance)
                };
                matches!(next, Next::Keep)
            });
        }
    }

    /// Polls the listener and every connection until one is ready or the earliest
    /// deadline passes; records each connection's readiness and returns the listener's.
    fn wait(&mut self) -> bool {
        let mut fds = Vec::with_capacity(self.conns.len() + 1);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for conn in &self.conns {
            let wanted = match conn.stage {
                Stage::Writing { .. } => PollFlags::OUT,
                Stage::Reading(_) | Stage::Draining(_) => PollFlags::IN,
            };
            fds.push(PollFd::from_borrowed_fd(conn.stream.as_fd(), wanted));
        }
        let timeout = self.conns.iter().map(|c| c.deadline).min().map(|earliest| {
            // A millisecond more, so the deadline has passed when poll returns.
            let left = earliest.saturating_duration_since(Instant::now()) + Duration::from_millis(1);
            Timespec::try_from(left).unwrap_or(Timespec { tv_sec: 1, tv_nsec: 0 })
        });
        // EINTR (or ENOMEM) reads as nothing ready: the loop looks again, deadlines hold.
        let polled = rustix::event::poll(&mut fds, timeout.as_ref()).is_ok();
        let ready: Vec<PollFlags> =
            fds.iter().map(|fd| if polled { fd.revents() } else { PollFlags::empty() }).collect();
        drop(fds);
        for (conn, ready) in self.conns.iter_mut().zip(&ready[1..]) {
            conn.ready = *ready;
        }
        !ready[0].is_empty()
    }

    /// Takes the waiting connections, at most as many as may be held in one turn (a
    /// flood of connections must not keep the loop from the requests already in);
    /// past the limit, the oldest held one is closed for each new one.
    fn accept(&mut self, now: Instant) {
        for _ in 0..self.limits.connections {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.conns.len() >= self.limits.connections {
                        // Connections are kept in the order they came: the first is oldest.
                        self.conns.remove(0);
                    }
                    let deadline = now + self.limits.deadline;
                    self.conns.push(Conn {
                        stream,
                        deadline,
                        stage: Stage::Reading(Vec::with_capacity(512)),
                        ready: PollFlags::IN,
                    });
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Out of descriptors and the like: let held connections end first.
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
        }
    }
}

impl Conn {
    /// Moves the connection on as far as its socket allows without blocking.
    fn progress(&mut self, source: &dyn Source, allowance: Duration) -> Next {
        loop {
            match &mut self.stage {
                Stage::Reading(head) => match read_head(&mut self.stream, head) {
                    Ok(None) => return Next::Keep,
                    Ok(Some(parsed)) => {
                        let then_drain = parsed == Head::TooLarge;
                        let out = render(&parsed, source);
                        self.stage = Stage::Writing { out, sent: 0, then_drain };
                        self.deadline = Instant::now() + allowance;
                    }
                    Err(_) => return Next::Close,
                },
                Stage::Writing { out, sent, then_drain } => {
                    while *sent < out.len() {
                        match self.stream.write(&out[*sent..]) {
                            Ok(0) => return Next::Close,
                            Ok(n) => *sent += n,
                            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return Next::Close,
                        }
                    }
                    if !*then_drain || self.stream.shutdown(std::net::Shutdown::Write).is_err() {
                        return Next::Close;
                    }
                    self.stage = Stage::Draining(DRAIN_AFTER_REFUSAL);
                    self.deadline = Instant::now() + allowance;
                }
                Stage::Draining(left) => {
                    let mut chunk = [0u8; 4096];
                    loop {
                        let want = chunk.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                        match self.stream.read(&mut chunk[..want]) {
                            Ok(0) => return Next::Close,
                            Ok(n) => {
                                *left -= n as u64;
                                if *left == 0 {
                                    return Next::Close;
                                }
                            }
                            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return Next::Close,
                        }
                    }
                }
            }
        }
    }
}

/// A request head as far as the endpoint cares.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Complete { method: String, path: String },
    TooLarge,
    Malformed,
}

/// Reads what has arrived into `head`: the parsed head once the blank line ending it is
/// in (or the limit is reached, or the client ended early), `None` while more may come.
fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> io::Result<Option<Head>> {
    let mut chunk = [0u8; 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if n == 0 {
            return Ok(Some(Head::Malformed));
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(parse_request_line(&head[..end])));
        }
        if head.len() >= MAX_REQUEST_HEAD {
            return Ok(Some(Head::TooLarge));
        }
    }
}

fn parse_request_line(head: &[u8]) -> Head {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else { return Head::Malformed };
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version), None) if version.starts_with("HTTP/1.") => {
            // A query string (some scrapers add one) does not change what is served.
            let path = target.split('?').next().unwrap_or_default();
            Head::Complete { method: method.to_string(), path: path.to_string() }
        }
        _ => Head::Malformed,
    }
}

/// The whole answer to `head`: status line, headers and (unless HEAD) the body.
fn render(head: &Head, source: &dyn Source) -> Vec<u8> {
    let (status, content_type, body) = route(head, source);
    let head_only = matches!(head, Head::Complete { method, .. } if method == "HEAD");
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// How much of an oversized request is read and dropped after the refusal.
const DRAIN_AFTER_REFUSAL: u64 = 64 << 10;

const TEXT: &str = "text/plain; charset=utf-8";

fn route(head: &Head, source: &dyn Source) -> (&'static str, &'static str, String) {
    let (method, path) = match head {
        Head::Complete { method, path } => (method.as_str(), path.as_str()),
        Head::TooLarge => {
            return ("431 Request Header Fields Too Large", TEXT, "request head too large\n".into())
        }
        Head::Malformed => return ("400 Bad Request", TEXT, "not an HTTP/1 request\n".into()),
    };
    if !matches!(path, "/metrics" | "/healthz") {
        return ("404 Not Found", TEXT, "only /metrics and /healthz are served\n".into());
    }
    if !matches!(method, "GET" | "HEAD") {
        return ("405 Method Not Allowed", TEXT, "only GET is served\n".into());
    }
    match path {
        "/metrics" => ("200 OK", METRICS_CONTENT_TYPE, source.metrics()),
        _ => match source.health() {
            Ok(detail) => ("200 OK", TEXT, format!("ok: {detail}\n")),
            Err(why) => ("503 Service Unavailable", TEXT, format!("unhealthy: {why}\n")),
        },
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
