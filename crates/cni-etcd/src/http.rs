//! etcd's JSON gateway over `ureq` (the HTTP crate kurma-net uses too): POST with a JSON
//! body on kept-alive connections (one `ureq::Agent` per [`Http`], pooling them), and a
//! message-by-message reader for the streaming endpoint (watch).
//!
//! The server's answer is not trusted with our memory or time: a member (or anyone on the
//! path to a plaintext one) decides every size in it. ureq bounds the response head
//! ([`MAX_HEAD`] bytes, status line and headers together; at most [`MAX_HEADERS`] lines)
//! and parses chunk sizes (at most 20 characters) without allocating them. We bound the
//! body ([`MAX_BODY`], refused up front when `Content-Length` announces more), each stream
//! message, and time: every read waits at most the client's timeout, and a unary answer
//! must arrive whole within [`ANSWER_TIMEOUTS`] of them. Anything over a limit is an
//! error naming the limit; a body cut short is an error, never a shorter answer.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use rustls::AlertDescription;
use ureq::config::{AutoHeaderValue, Config};
use ureq::http::{Response, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Connector, DefaultConnector, NextTimeout};
use ureq::{Agent, Body};

use crate::coalesce::Coalesce;
use crate::tls::Tls;

/// The largest response head (status line and every header line together). etcd's is
/// about 200 bytes; ureq refuses a longer one before reading further.
pub const MAX_HEAD: usize = 8 * 1024;

/// The most header lines one response may have (etcd sends about five): ureq's own fixed
/// bound, which it checks before storing them.
pub const MAX_HEADERS: usize = 128;

/// The largest body of a unary answer, and the largest single message of a stream. etcd
/// refuses requests over 1.5 MiB by default, so one record is far smaller; the largest
/// answers are prefix listings (etcd-ipam's GC lists every handle), about 300 bytes of JSON
/// per key, so this holds tens of thousands of keys.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// A unary answer must arrive whole within this many read timeouts: a member trickling a
/// byte just inside each read's timeout cannot hold a call (and a plugin) for ever.
pub const ANSWER_TIMEOUTS: u32 = 4;

/// The size of each of a connection's two buffers (ureq's default is 128 KiB): twice the
/// largest head, so a head at the limit still fits with the start of its body.
const IO_BUFFER: usize = 2 * MAX_HEAD;

/// How many stream messages may wait, read but not yet taken, before the reader waits.
const STREAM_BACKLOG: usize = 16;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn over_limit(what: &str, size: impl std::fmt::Display) -> io::Error {
    bad(format!("{what} of {size} bytes is over the {} MiB limit", MAX_BODY >> 20))
}

/// TLS failures say so, and say whose certificate is at fault: "TLS: received fatal alert:
/// BadCertificate (the member refused this client's certificate: certFile/keyFile)" rather
/// than a bare alert name.
fn tls_error(err: &rustls::Error) -> io::Error {
    let hint = match err {
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate,
        ) => " (the member refused this client's certificate: certFile/keyFile)",
        rustls::Error::InvalidCertificate(_) => {
            " (the member's certificate is not signed by caFile's CA or does not name the endpoint's host)"
        }
        _ => "",
    };
    io::Error::new(io::ErrorKind::ConnectionRefused, format!("TLS: {err}{hint}"))
}

/// ureq's error as the `io::Error` the rest of this crate reports, with our limits named.
fn io_error(err: ureq::Error) -> io::Error {
    match err {
        ureq::Error::Timeout(ureq::Timeout::Global) => {
            io::Error::new(io::ErrorKind::TimedOut, "the answer did not arrive whole in time")
        }
        ureq::Error::Timeout(which) => io::Error::new(io::ErrorKind::TimedOut, format!("timeout: {which}")),
        ureq::Error::BodyExceedsLimit(_) => over_limit("a body", format!("more than {MAX_BODY}")),
        ureq::Error::LargeResponseHeader(..) => {
            bad(format!("a response head over the {}-KiB limit", MAX_HEAD >> 10))
        }
        ureq::Error::Rustls(tls) => tls_error(&tls),
        ureq::Error::Io(io) => match io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            Some(tls) => tls_error(tls),
            None => io,
        },
        ureq::Error::Protocol(ureq_proto::Error::HttpParseTooManyHeaders) => {
            bad(format!("a response over the limit of {MAX_HEADERS} header lines"))
        }
        ureq::Error::Protocol(e) => bad(format!("not a well-formed HTTP answer: {e}")),
        other => io::Error::other(other.to_string()),
    }
}

/// With TLS 1.3 a member refuses a client certificate (or its absence) after the client
/// has finished its side of the handshake, so the refusal can reach us as the request's
/// write failing on a closed connection instead of as the member's alert.
fn hang_up_hint(err: io::Error) -> io::Error {
    match err.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof => {
            io::Error::new(
                err.kind(),
                format!(
                    "TLS: {err} (the member hung up: does it require a client certificate? certFile/keyFile)"
                ),
            )
        }
        _ => err,
    }
}

/// A `Content-Length` over [`MAX_BODY`] is refused before any of the body is read.
fn check_length(response: &Response<Body>) -> io::Result<()> {
    let Some(length) = response.headers().get("content-length") else { return Ok(()) };
    let length = length.to_str().ok().and_then(|l| l.trim().parse::<u64>().ok());
    match length {
        Some(length) if length > MAX_BODY as u64 => Err(over_limit("Content-Length", length)),
        Some(_) => Ok(()),
        None => Err(bad(format!("bad Content-Length {:?}", response.headers()["content-length"]))),
    }
}

/// Endpoints are nearly always IP addresses: those are used as they are. ureq's own
/// resolver runs every look-up under a deadline on a new thread, which cost a plugin
/// process about 0.6 ms a call (measured), twice its whole etcd-ipam ADD before; names
/// still go to it.
#[derive(Debug, Default)]
struct LiteralResolver {
    names: DefaultResolver,
}

impl Resolver for LiteralResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let literal =
            uri.host().and_then(|host| host.trim_start_matches('[').trim_end_matches(']').parse().ok());
        match (literal, uri.port_u16()) {
            (Some(ip), Some(port)) => {
                let mut addrs = self.names.empty();
                addrs.push(SocketAddr::new(ip, port));
                Ok(addrs)
            }
            _ => self.names.resolve(uri, config, timeout),
        }
    }
}

/// The HTTP side of one etcd client: its pooled connections and time limits.
pub struct Http {
    agent: Agent,
    tls: bool,
    scheme: &'static str,
    timeout: Duration,
}

impl Http {
    /// Connections wait `timeout` for each connect, read and write; with `tls` they are
    /// `https://` connections trusting only its CA and presenting its client certificate.
    pub fn new(timeout: Duration, tls: Option<&Tls>) -> Http {
        let mut config = Agent::config_builder()
            // etcd's error answers carry JSON the caller reads: a status is not an error here.
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(AutoHeaderValue::None)
            .accept(AutoHeaderValue::None)
            .accept_encoding(AutoHeaderValue::None)
            .max_response_header_size(MAX_HEAD)
            // ureq zero-fills both buffers when it connects: its default 128 KiB each cost a
            // plugin process 64 page faults, a third of its CPU (measured). etcd's requests
            // and answer heads are a few hundred bytes; bodies stream through in pieces.
            .input_buffer_size(IO_BUFFER)
            .output_buffer_size(IO_BUFFER)
            .timeout_connect(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout))
            .timeout_global(Some(timeout * ANSWER_TIMEOUTS));
        if let Some(tls) = tls {
            config = config.tls_config(tls.config.clone());
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let connector = DefaultConnector::new().chain(Coalesce);
        let agent = Agent::with_parts(config.build(), connector, LiteralResolver::default());
        Http { agent, tls: tls.is_some(), scheme, timeout }
    }

    /// A failed exchange as an `io::Error`, with the TLS hint where it may apply.
    fn error(&self, err: ureq::Error) -> io::Error {
        let hang_up = self.tls && matches!(err, ureq::Error::Io(_));
        let err = io_error(err);
        if hang_up {
            hang_up_hint(err)
        } else {
            err
        }
    }

    /// POSTs `body` to `path` on `host` (`host:port`); returns the status and whole body.
    #[cfg(test)]
    pub fn post(&self, host: &str, path: &str, body: &[u8]) -> io::Result<(u16, Vec<u8>)> {
        self.post_within(host, path, body, self.timeout)
    }

    /// [`Http::post`] waiting at most `patience` (when shorter than the client's timeout)
    /// from the request's sending to the answer's head: a `TimedOut` error then, and the
    /// connection is dropped (the request may still take effect on the member).
    pub fn post_within(
        &self,
        host: &str,
        path: &str,
        body: &[u8],
        patience: Duration,
    ) -> io::Result<(u16, Vec<u8>)> {
        let url = format!("{}://{host}{path}", self.scheme);
        let request = self.agent.post(&url);
        // At the full timeout the agent's own limits apply as they are (each read, and the
        // whole answer within ANSWER_TIMEOUTS).
        let request = if patience < self.timeout {
            request.config().timeout_recv_response(Some(patience)).build()
        } else {
            request
        };
        let mut response =
            request.header("content-type", "application/json").send(body).map_err(|e| self.error(e))?;
        check_length(&response)?;
        let status = response.status().as_u16();
        let body =
            response.body_mut().with_config().limit(MAX_BODY as u64).read_to_vec().map_err(io_error)?;
        Ok((status, body))
    }

    /// POSTs `body` to a streaming endpoint; its messages are then read one by one with
    /// [`Stream::next_message`]. The head must come within the unary limits; the stream
    /// itself may then be silent for as long as the watched keys are.
    pub fn post_stream(&self, host: &str, path: &str, body: &[u8]) -> io::Result<Stream> {
        let url = format!("{}://{host}{path}", self.scheme);
        let response = self
            .agent
            .post(&url)
            .config()
            .timeout_global(None)
            .timeout_per_read(None)
            .timeout_recv_response(Some(self.timeout * ANSWER_TIMEOUTS))
            .build()
            .header("content-type", "application/json")
            .send(body)
            .map_err(|e| self.error(e))?;
        if response.status() != 200 {
            return Err(bad(format!("{path}: HTTP status {}", response.status())));
        }
        Ok(Stream::start(response.into_body()))
    }
}

/// A streaming response: newline-delimited JSON messages, read by a thread of its own so
/// that each wait for the next one can have its own timeout. The thread ends when the
/// stream does, or at the first message after the `Stream` is dropped.
pub struct Stream {
    messages: Receiver<io::Result<Vec<u8>>>,
}

impl Stream {
    fn start(body: Body) -> Stream {
        let (sender, messages) = mpsc::sync_channel(STREAM_BACKLOG);
        let reader = body.into_reader();
        std::thread::Builder::new()
            .name("etcd-stream".into())
            .spawn(move || split_messages(reader, &sender))
            .map(|_| Stream { messages })
            .unwrap_or_else(|e| {
                let (sender, messages) = mpsc::sync_channel(1);
                let _ = sender.send(Err(e));
                Stream { messages }
            })
    }

    /// The next message (one JSON document); a `TimedOut` error when none came within
    /// `timeout`, another error when the stream ended or broke.
    pub fn next_message(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        match self.messages.recv_timeout(timeout) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => Err(io::Error::new(io::ErrorKind::TimedOut, "no message")),
            Err(RecvTimeoutError::Disconnected) => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended"))
            }
        }
    }
}

/// Reads `reader` to its end, sending each non-blank line; a line longer than
/// [`MAX_BODY`] (a message that never ends) ends the stream with an error.
fn split_messages(mut reader: impl Read, sender: &SyncSender<io::Result<Vec<u8>>>) {
    let mut pending = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let message: Vec<u8> = pending.drain(..=end).collect();
            if !message.iter().all(u8::is_ascii_whitespace) && sender.send(Ok(message)).is_err() {
                return;
            }
        }
        let read = match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = sender.send(Err(e));
                return;
            }
        };
        if pending.len() + read > MAX_BODY {
            let _ = sender.send(Err(over_limit("a stream message", pending.len() + read)));
            return;
        }
        pending.extend_from_slice(&buf[..read]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_testkit::etcd::HostileServer;

    const OK_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

    fn host(server: &HostileServer) -> String {
        server.endpoint().trim_start_matches("http://").to_string()
    }

    fn post_to(server: &HostileServer) -> io::Result<(u16, Vec<u8>)> {
        Http::new(Duration::from_secs(5), None).post(&host(server), "/v3/kv/range", b"{}")
    }

    fn refused(server: &HostileServer) -> String {
        let err = post_to(server).expect_err("an oversized answer must be an error");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        err.to_string()
    }

    #[test]
    fn a_well_formed_answer_still_parses() {
        let plain = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        assert_eq!(post_to(&plain).unwrap(), (200, b"{}".to_vec()));
        let chunked = HostileServer::start(&[OK_CHUNKED, b"1\r\n{\r\n1;ext=1\r\n}\r\n0\r\n\r\n"].concat());
        assert_eq!(post_to(&chunked).unwrap(), (200, b"{}".to_vec()));
    }

    #[test]
    fn an_endpoint_may_be_a_name_as_well_as_an_address() {
        let server = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        let by_name = host(&server).replace("127.0.0.1", "localhost");
        let answer = Http::new(Duration::from_secs(5), None).post(&by_name, "/v3/kv/range", b"{}");
        assert_eq!(answer.unwrap(), (200, b"{}".to_vec()));
    }

    #[test]
    fn a_huge_content_length_is_refused_before_allocating() {
        let server = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
        let err = refused(&server);
        assert!(err.contains("Content-Length of 1000000000000 bytes is over the 8 MiB limit"), "{err}");
        let server =
            HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n");
        let err = post_to(&server).expect_err("a Content-Length no u64 holds");
        assert!(
            err.to_string().contains("Content-Length") || err.kind() == io::ErrorKind::InvalidData,
            "{err}"
        );
    }

    #[test]
    fn a_huge_chunk_size_is_read_only_up_to_the_limit() {
        // ureq parses the size without allocating it; the body read stops at MAX_BODY.
        let mib = vec![b'x'; 1 << 20];
        let server = HostileServer::start_endless(&[OK_CHUNKED, b"ffffffffffff\r\n"].concat(), &mib);
        let err = refused(&server);
        assert!(err.contains("over the 8 MiB limit"), "{err}");
        // More digits than a u64 holds, and not hex at all.
        let server = HostileServer::start(&[OK_CHUNKED, b"1ffffffffffffffffffff\r\n"].concat());
        assert!(refused(&server).contains("not a well-formed HTTP answer"));
        let server = HostileServer::start(&[OK_CHUNKED, b"-1\r\n"].concat());
        assert!(refused(&server).contains("not a well-formed HTTP answer"));
    }

    #[test]
    fn a_chunked_body_cut_short_is_an_error_not_a_short_answer() {
        // The member announces a chunk, sends "{}" of it and hangs up: "{}" is valid JSON
        // (an empty range), so taking it for the whole answer would be a wrong answer.
        let server = HostileServer::start(&[OK_CHUNKED, b"10\r\n{}"].concat());
        post_to(&server).expect_err("a body cut short must be an error");
        let server = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{}");
        post_to(&server).expect_err("a body shorter than its Content-Length must be an error");
    }

    #[test]
    fn chunks_adding_up_past_the_limit_are_refused() {
        let mib = 1 << 20;
        let chunk = [format!("{mib:x}\r\n").as_bytes(), &vec![b'x'; mib], b"\r\n"].concat();
        let server = HostileServer::start_endless(OK_CHUNKED, &chunk);
        let err = refused(&server);
        assert!(err.contains("over the 8 MiB limit"), "{err}");
    }

    #[test]
    fn an_endless_header_line_is_refused() {
        let limit = format!("over the {}-KiB limit", MAX_HEAD >> 10);
        let server = HostileServer::start_endless(b"HTTP/1.1 200 OK\r\nX-Junk: ", &[b'a'; 4096]);
        assert!(refused(&server).contains(&limit));
        // The status line too.
        let server = HostileServer::start_endless(b"HTTP/1.1 200 ", &[b'a'; 4096]);
        assert!(refused(&server).contains(&limit));
    }

    #[test]
    fn endless_headers_are_refused() {
        let server = HostileServer::start_endless(b"HTTP/1.1 200 OK\r\n", b"X-Junk: a\r\n");
        let err = refused(&server);
        assert!(err.contains(&format!("over the limit of {MAX_HEADERS} header lines")), "{err}");
    }

    #[test]
    fn a_trickled_answer_must_arrive_whole_in_time() {
        // A byte every 20 ms, each well inside the 300 ms read timeout: only the whole
        // answer's limit (4 read timeouts) ends the call, long before MAX_HEAD of head.
        let server =
            HostileServer::start_trickle(b"HTTP/1.1 200 OK\r\nX-Junk: ", b"a", Duration::from_millis(20));
        let http = Http::new(Duration::from_millis(300), None);
        let err = http.post(&host(&server), "/v3/kv/range", b"{}").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("did not arrive whole in time"), "{err}");
        // The same trickle in the body of a well-formed head.
        let server = HostileServer::start_trickle(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
            b"a",
            Duration::from_millis(20),
        );
        let err = http.post(&host(&server), "/v3/kv/range", b"{}").unwrap_err();
        assert!(err.to_string().contains("did not arrive whole in time"), "{err}");
    }

    #[test]
    fn a_stream_message_without_end_is_refused() {
        let mib = 1 << 20;
        let chunk = [format!("{mib:x}\r\n").as_bytes(), &vec![b'x'; mib], b"\r\n"].concat();
        let server = HostileServer::start_endless(OK_CHUNKED, &chunk);
        let http = Http::new(Duration::from_secs(5), None);
        let mut stream = http.post_stream(&host(&server), "/v3/watch", b"{}").unwrap();
        let err = stream.next_message(Duration::from_secs(30)).unwrap_err();
        assert!(err.to_string().contains("stream message of"), "{err}");
    }
}
