//! Just enough HTTP/1.1 for etcd's JSON gateway: POST with a JSON body on a kept-alive
//! connection, responses with `Content-Length` or chunked bodies, and a chunk-by-chunk
//! reader for the streaming endpoints (watch, lease keep-alive).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConnection, StreamOwned};

use crate::tls::Tls;

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

/// One kept-alive connection to one etcd member.
pub struct Conn {
    host: String,
    reader: BufReader<Transport>,
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
                    return Ok(Conn { host: host.to_string(), reader: BufReader::new(transport) });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Changes how long a read may block (streams wait longer than unary calls).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.reader.get_ref().socket().set_read_timeout(timeout)
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

    fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by etcd"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    fn read_head(&mut self) -> io::Result<Head> {
        let status_line = self.read_line()?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("not an HTTP response: {status_line:?}")))?;
        let mut head = Head { status, length: None, chunked: false };
        loop {
            let line = self.read_line()?;
            if line.is_empty() {
                return Ok(head);
            }
            let Some((name, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                head.length = Some(value.parse().map_err(|_| bad("bad Content-Length"))?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
    }

    /// The next chunk of a chunked body; `None` at its end.
    fn read_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size_line = self.read_line()?;
        let size_hex = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("bad chunk size"))?;
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
        let head = self.read_head()?;
        let body = if head.chunked {
            let mut body = Vec::new();
            while let Some(chunk) = self.read_chunk()? {
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
        let head = self.read_head()?;
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
                Some(chunk) => self.pending.extend_from_slice(&chunk),
                None => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended")),
            }
        }
    }

    /// Changes how long [`Stream::next_message`] may block.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.conn.set_read_timeout(timeout)
    }
}
