//! Just enough HTTP/1.1 for etcd's JSON gateway: POST with a JSON body on a kept-alive
//! connection, responses with `Content-Length` or chunked bodies, and a chunk-by-chunk
//! reader for the streaming endpoints (watch, lease keep-alive).
//!
//! The server's answer is not trusted with our memory: a member (or anyone on the path to
//! a plaintext one) decides every size in it, so each is checked against a fixed limit
//! before anything is allocated, and an answer over a limit is an `InvalidData` error
//! naming the limit ([`MAX_LINE`], [`MAX_HEADERS`], [`MAX_BODY`]).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConnection, StreamOwned};

use crate::tls::Tls;

/// The longest status, header or chunk-size line read (etcd's are well under 200 bytes).
pub const MAX_LINE: usize = 8 * 1024;

/// The most header lines one response may have (etcd sends about five).
pub const MAX_HEADERS: usize = 64;

/// The largest body (all chunks together) of a unary answer, and the largest single
/// message of a stream. etcd refuses requests over 1.5 MiB by default, so one record is far
/// smaller; the largest answers are prefix listings (etcd-ipam's GC lists every handle),
/// about 300 bytes of JSON per key, so this holds tens of thousands of keys.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// A unary answer must arrive whole within this many read timeouts: a member trickling a
/// byte just inside each read's timeout cannot hold a call (and a plugin) for ever.
pub const ANSWER_TIMEOUTS: u32 = 4;

/// The bytes under HTTP: a plain socket or TLS over one.
enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// TLS failures say so, and say whose certificate is at fault: "TLS: received fatal alert:
/// BadCertificate (the member refused this client's certificate: certFile/keyFile)" rather
/// than a bare alert name.
fn tls_context(err: io::Error) -> io::Error {
    let Some(tls_err) = err.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return err;
    };
    let hint = match tls_err {
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
    io::Error::new(err.kind(), format!("TLS: {err}{hint}"))
}

impl Transport {
    fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(socket) => socket,
            Transport::Tls(stream) => stream.get_ref(),
        }
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(socket) => socket.read(buf),
            Transport::Tls(stream) => stream.read(buf).map_err(tls_context),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(socket) => socket.write(buf),
            Transport::Tls(stream) => stream.write(buf).map_err(tls_context),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(socket) => socket.flush(),
            Transport::Tls(stream) => stream.flush().map_err(tls_context),
        }
    }
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The transport with the time limits of the answer being read: each read waits at most
/// `read_timeout`, and none starts after `deadline` (when one is set).
struct Timed {
    transport: Transport,
    read_timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(deadline) = self.deadline else { return self.transport.read(buf) };
        let late = || io::Error::new(io::ErrorKind::TimedOut, "the answer did not arrive whole in time");
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        // The read waits its own timeout, or what is left of the answer's time if shorter.
        let cut = self.read_timeout.is_none_or(|timeout| left < timeout);
        let wait = if cut { left } else { self.read_timeout.unwrap_or(left) };
        self.transport.socket().set_read_timeout(Some(wait))?;
        match self.transport.read(buf) {
            Err(e) if cut && is_timeout(&e) => Err(late()),
            other => other,
        }
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.transport.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.transport.flush()
    }
}

/// One kept-alive connection to one etcd member.
pub struct Conn {
    host: String,
    reader: BufReader<Timed>,
}

/// The name the member's certificate must carry: the endpoint's host without the port
/// (an IP address is matched against the certificate's IP SANs).
fn server_name(host: &str) -> io::Result<ServerName<'static>> {
    let name = match host.rsplit_once(':') {
        Some((name, _port)) => name,
        None => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS server name {name:?}: {e}")))
}

/// Runs the TLS handshake now, so that an untrusted server certificate fails the connect
/// (and names TLS) rather than the first request.
fn handshake(socket: TcpStream, host: &str, tls: &Tls) -> io::Result<Transport> {
    let connection = ClientConnection::new(tls.config.clone(), server_name(host)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))?;
    let mut stream = StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).map_err(tls_context)?;
    }
    Ok(Transport::Tls(Box::new(stream)))
}

/// The head of a response: its status and how its body is framed.
struct Head {
    status: u16,
    length: Option<usize>,
    chunked: bool,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// `size` as a usize when it is at most [`MAX_BODY`]; else an error naming `what`.
fn within_body_limit(size: u64, what: &str) -> io::Result<usize> {
    match usize::try_from(size) {
        Ok(size) if size <= MAX_BODY => Ok(size),
        _ => Err(bad(format!("{what} of {size} bytes is over the {} MiB limit", MAX_BODY >> 20))),
    }
}

impl Conn {
    /// Connects to `host:port` (an etcd client URL without the scheme).
    /// With `tls`, the connection is TLS (an `https://` endpoint).
    pub fn connect(host: &str, timeout: Duration, tls: Option<&Tls>) -> io::Result<Conn> {
        let addrs: Vec<SocketAddr> = host.to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    let transport = match tls {
                        Some(tls) => handshake(stream, host, tls)?,
                        None => Transport::Plain(stream),
                    };
                    let timed = Timed { transport, read_timeout: Some(timeout), deadline: None };
                    return Ok(Conn { host: host.to_string(), reader: BufReader::new(timed) });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Changes how long a read may block (streams wait longer than unary calls).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.reader.get_mut().read_timeout = timeout;
        self.reader.get_ref().transport.socket().set_read_timeout(timeout)
    }

    /// Starts the clock of an answer: it must be read whole within [`ANSWER_TIMEOUTS`] read
    /// timeouts (no limit when reads may block for ever).
    fn arm_deadline(&mut self) {
        let timed = self.reader.get_mut();
        timed.deadline = timed.read_timeout.map(|timeout| Instant::now() + timeout * ANSWER_TIMEOUTS);
    }

    /// The answer is read: later reads (a stream's) have only their own timeout.
    fn disarm_deadline(&mut self) -> io::Result<()> {
        let timed = self.reader.get_mut();
        timed.deadline = None;
        let timeout = timed.read_timeout;
        timed.transport.socket().set_read_timeout(timeout)
    }

    fn send(&mut self, path: &str, body: &[u8]) -> io::Result<()> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        // One write: the request head and body go out in one segment.
        let mut request = Vec::with_capacity(head.len() + body.len());
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(body);
        self.reader.get_mut().write_all(&request)
    }

    /// One line without its CRLF, at most [`MAX_LINE`] bytes: a longer one is an error, not
    /// a buffer that grows for as long as the server sends.
    fn read_line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        let limit = MAX_LINE as u64 + 2;
        if (&mut self.reader).take(limit).read_until(b'\n', &mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by etcd"));
        }
        if line.last() != Some(&b'\n') {
            if line.len() as u64 == limit {
                return Err(bad(format!("a response line over the {MAX_LINE}-byte limit")));
            }
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by etcd mid-line"));
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        String::from_utf8(line).map_err(|_| bad("a response line that is not UTF-8"))
    }

    fn read_head(&mut self) -> io::Result<Head> {
        let status_line = self.read_line()?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("not an HTTP response: {status_line:?}")))?;
        let mut head = Head { status, length: None, chunked: false };
        for _ in 0..=MAX_HEADERS {
            let line = self.read_line()?;
            if line.is_empty() {
                return Ok(head);
            }
            let Some((name, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let length: u64 = value.parse().map_err(|_| bad(format!("bad Content-Length {value:?}")))?;
                head.length = Some(within_body_limit(length, "Content-Length")?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
        Err(bad(format!("a response over the limit of {MAX_HEADERS} header lines")))
    }

    /// The next chunk of a chunked body; `None` at its end.
    fn read_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size_line = self.read_line()?;
        let size_hex = size_line.split(';').next().unwrap_or("").trim();
        // u64 and at most 16 digits: a longer or larger size is refused, never allocated.
        let size = match size_hex.len() {
            1..=16 => u64::from_str_radix(size_hex, 16).ok(),
            _ => None,
        };
        let size = size.ok_or_else(|| bad(format!("bad chunk size {size_hex:?}")))?;
        let size = within_body_limit(size, "chunk size")?;
        if size == 0 {
            // Trailers (none expected) up to the empty line.
            while !self.read_line()?.is_empty() {}
            return Ok(None);
        }
        let mut chunk = vec![0; size];
        self.reader.read_exact(&mut chunk)?;
        let mut crlf = [0; 2];
        self.reader.read_exact(&mut crlf)?;
        Ok(Some(chunk))
    }

    /// POSTs `body` to `path` and returns the status and whole body.
    pub fn post(&mut self, path: &str, body: &[u8]) -> io::Result<(u16, Vec<u8>)> {
        self.send(path, body)?;
        self.arm_deadline();
        let answer = self.read_answer();
        self.disarm_deadline()?;
        answer
    }

    fn read_answer(&mut self) -> io::Result<(u16, Vec<u8>)> {
        let head = self.read_head()?;
        let body = if head.chunked {
            let mut body = Vec::new();
            while let Some(chunk) = self.read_chunk()? {
                within_body_limit((body.len() + chunk.len()) as u64, "chunked body")?;
                body.extend_from_slice(&chunk);
            }
            body
        } else {
            let length = head.length.ok_or_else(|| bad("response without a length"))?;
            let mut body = vec![0; length];
            self.reader.read_exact(&mut body)?;
            body
        };
        Ok((head.status, body))
    }

    /// POSTs `body` to a streaming endpoint; the response's messages are then read one by
    /// one with [`Stream::next_message`]. The connection is the stream's from then on.
    pub fn post_stream(mut self, path: &str, body: &[u8]) -> io::Result<Stream> {
        self.send(path, body)?;
        self.arm_deadline();
        let head = self.read_head();
        self.disarm_deadline()?;
        let head = head?;
        if head.status != 200 {
            return Err(bad(format!("{path}: HTTP status {}", head.status)));
        }
        if !head.chunked {
            return Err(bad(format!("{path}: expected a chunked stream")));
        }
        Ok(Stream { conn: self, pending: Vec::new() })
    }
}

/// A streaming response: newline-delimited JSON messages spread over HTTP chunks.
pub struct Stream {
    conn: Conn,
    pending: Vec<u8>,
}

impl Stream {
    /// The next message (one JSON document); an error when the stream ends.
    pub fn next_message(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let message: Vec<u8> = self.pending.drain(..=end).collect();
                if message.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(message);
            }
            match self.conn.read_chunk()? {
                Some(chunk) => {
                    // A message that never ends (no newline) must not grow without bound.
                    within_body_limit((self.pending.len() + chunk.len()) as u64, "stream message")?;
                    self.pending.extend_from_slice(&chunk)
                }
                None => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended")),
            }
        }
    }

    /// Changes how long [`Stream::next_message`] may block.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.conn.set_read_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_etcd_testing::HostileServer;

    const OK_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

    fn post_to(server: &HostileServer) -> io::Result<(u16, Vec<u8>)> {
        let host = server.endpoint().trim_start_matches("http://").to_string();
        let mut conn = Conn::connect(&host, Duration::from_secs(5), None)?;
        conn.post("/v3/kv/range", b"{}")
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
    fn a_huge_content_length_is_refused_before_allocating() {
        let server = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
        let err = refused(&server);
        assert!(err.contains("Content-Length of 1000000000000 bytes is over the 8 MiB limit"), "{err}");
        let server =
            HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n");
        assert!(refused(&server).contains("bad Content-Length"));
    }

    #[test]
    fn a_huge_chunk_size_is_refused_before_allocating() {
        let server = HostileServer::start(&[OK_CHUNKED, b"ffffffffffff\r\nab\r\n"].concat());
        let err = refused(&server);
        assert!(err.contains("chunk size of 281474976710655 bytes is over the 8 MiB limit"), "{err}");
        // More digits than a u64 holds, and not hex at all.
        let server = HostileServer::start(&[OK_CHUNKED, b"1ffffffffffffffffffff\r\n"].concat());
        assert!(refused(&server).contains("bad chunk size"));
        let server = HostileServer::start(&[OK_CHUNKED, b"-1\r\n"].concat());
        assert!(refused(&server).contains("bad chunk size"));
    }

    #[test]
    fn chunks_adding_up_past_the_limit_are_refused() {
        let mib = 1 << 20;
        let chunk = [format!("{mib:x}\r\n").as_bytes(), &vec![b'x'; mib], b"\r\n"].concat();
        let server = HostileServer::start_endless(OK_CHUNKED, &chunk);
        let err = refused(&server);
        assert!(err.contains("chunked body of") && err.contains("8 MiB limit"), "{err}");
    }

    #[test]
    fn an_endless_header_line_is_refused() {
        let server = HostileServer::start_endless(b"HTTP/1.1 200 OK\r\nX-Junk: ", &[b'a'; 4096]);
        assert!(refused(&server).contains(&format!("over the {MAX_LINE}-byte limit")));
        // The status line too.
        let server = HostileServer::start_endless(b"HTTP/1.1 200 ", &[b'a'; 4096]);
        assert!(refused(&server).contains(&format!("over the {MAX_LINE}-byte limit")));
    }

    #[test]
    fn endless_headers_are_refused() {
        let server = HostileServer::start_endless(b"HTTP/1.1 200 OK\r\n", b"X-Junk: a\r\n");
        assert!(refused(&server).contains(&format!("over the limit of {MAX_HEADERS} header lines")));
    }

    #[test]
    fn a_trickled_answer_must_arrive_whole_in_time() {
        // A byte every 20 ms, each well inside the 300 ms read timeout: only the whole
        // answer's limit (4 read timeouts) ends the call, long before 8 KiB of line.
        let server =
            HostileServer::start_trickle(b"HTTP/1.1 200 OK\r\nX-Junk: ", b"a", Duration::from_millis(20));
        let host = server.endpoint().trim_start_matches("http://").to_string();
        let mut conn = Conn::connect(&host, Duration::from_millis(300), None).unwrap();
        let err = conn.post("/v3/kv/range", b"{}").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("did not arrive whole in time"), "{err}");
    }

    #[test]
    fn a_stream_message_without_end_is_refused() {
        let mib = 1 << 20;
        let chunk = [format!("{mib:x}\r\n").as_bytes(), &vec![b'x'; mib], b"\r\n"].concat();
        let server = HostileServer::start_endless(OK_CHUNKED, &chunk);
        let host = server.endpoint().trim_start_matches("http://").to_string();
        let conn = Conn::connect(&host, Duration::from_secs(5), None).unwrap();
        let mut stream = conn.post_stream("/v3/watch", b"{}").unwrap();
        let err = stream.next_message().unwrap_err();
        assert!(err.to_string().contains("stream message of"), "{err}");
    }
}
