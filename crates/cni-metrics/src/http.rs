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
//! - **How many**: [`WORKERS`] connection threads, started once; accepted connections wait
//!   for one in a queue of [`QUEUE`]; a connection arriving while the queue is full is
//!   closed at once. Threads and memory are thus fixed whatever the number of clients. A
//!   client holding every thread delays scrapes (by at most the deadline per connection
//!   it holds), never the daemon.
//! - **What**: `GET` (and `HEAD`) of the two paths; any other path is 404, any other
//!   method 405, anything that is not HTTP 400.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest request head taken: a scraper's is a few hundred bytes.
pub const MAX_REQUEST_HEAD: usize = 8 << 10;
/// The time a client has to send its request head, and again to take the answer.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Connection threads.
pub const WORKERS: usize = 2;
/// Accepted connections waiting for a thread; more are closed at once.
pub const QUEUE: usize = 8;

/// The bounds of an endpoint ([`DEADLINE`], [`WORKERS`], [`QUEUE`] in the daemons).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub workers: usize,
    pub queue: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { deadline: DEADLINE, workers: WORKERS, queue: QUEUE }
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

/// Binds `address` and serves `source` on background threads; returns the bound address
/// (the port chosen when `address` had port 0). Binding errors come back at once, so a
/// daemon started with a bad address fails at start rather than run without its metrics.
pub fn serve(address: SocketAddr, source: Arc<dyn Source>) -> io::Result<SocketAddr> {
    serve_with(address, source, Limits::default())
}

/// [`serve`] with other bounds (tests use a short deadline).
pub fn serve_with(address: SocketAddr, source: Arc<dyn Source>, limits: Limits) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    let (queue, waiting) = sync_channel::<TcpStream>(limits.queue);
    let waiting = Arc::new(Mutex::new(waiting));
    for _ in 0..limits.workers.max(1) {
        let (waiting, source) = (waiting.clone(), source.clone());
        let deadline = limits.deadline;
        std::thread::Builder::new()
            .name("metrics conn".into())
            .spawn(move || work(&waiting, &*source, deadline))?;
    }
    std::thread::Builder::new().name("metrics accept".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else {
                // Out of descriptors and the like: wait for connections to end.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            match queue.try_send(stream) {
                Ok(()) => {}
                // Busy: the client is dropped (closed) rather than queued without end.
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    })?;
    Ok(bound)
}

fn work(waiting: &Mutex<Receiver<TcpStream>>, source: &dyn Source, deadline: Duration) {
    loop {
        let next = waiting.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(stream) = next else { return };
        // A failed connection is the client's problem; the thread serves the next one.
        let _ = answer(stream, source, deadline);
    }
}

/// A request head as far as the endpoint cares.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Complete { method: String, path: String },
    TooLarge,
    Malformed,
}

/// Reads until the blank line ending the head, within the size limit and the deadline.
fn read_head(stream: &mut TcpStream, allowed: Duration) -> io::Result<Head> {
    let deadline = Instant::now() + allowed;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(Head::Malformed);
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(parse_request_line(&head[..end]));
        }
        if head.len() >= MAX_REQUEST_HEAD {
            return Ok(Head::TooLarge);
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

fn answer(mut stream: TcpStream, source: &dyn Source, deadline: Duration) -> io::Result<()> {
    let head = read_head(&mut stream, deadline)?;
    let (status, content_type, body) = route(&head, source);
    let head_only = matches!(&head, Head::Complete { method, .. } if method == "HEAD");
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.set_write_timeout(Some(deadline))?;
    stream.write_all(&out)?;
    if head == Head::TooLarge {
        // Closing with unread data resets the connection, which can destroy the answer
        // before the client reads it: a little more is taken (and dropped) first.
        stream.shutdown(std::net::Shutdown::Write)?;
        stream.set_read_timeout(Some(deadline))?;
        let _ = io::copy(&mut (&mut stream).take(DRAIN_AFTER_REFUSAL), &mut io::sink());
    }
    Ok(())
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
