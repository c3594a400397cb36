//! A hostile HTTP server on 127.0.0.1 that plays a registry or a web server serving
//! images: it answers each path as the test scripts it (lying `Content-Length`, bodies
//! that do not end, redirects), and counts what it managed to send and what was asked.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server sends for one request.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

pub enum Body {
    Bytes(Vec<u8>),
    /// `prefix` then filler bytes, `len` in all, and then the connection is closed (or
    /// the client hangs up first).
    Stream {
        prefix: Vec<u8>,
        len: u64,
    },
}

impl Reply {
    /// A 200 with a correct `Content-Length`.
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        let body = body.into();
        Reply {
            status: 200,
            headers: vec![("Content-Length".into(), body.len().to_string())],
            body: Body::Bytes(body),
        }
    }

    /// A 200 whose body is `len` bytes without a `Content-Length` (it ends when the
    /// connection closes): what a body that never ends looks like until it ends.
    pub fn stream(prefix: &[u8], len: u64) -> Reply {
        Reply { status: 200, headers: Vec::new(), body: Body::Stream { prefix: prefix.to_vec(), len } }
    }

    /// A 200 that declares `declared` bytes and sends `len`.
    pub fn declaring(declared: u64, len: u64) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Length".into(), declared.to_string())],
            body: Body::Stream { prefix: Vec::new(), len },
        }
    }

    pub fn not_found() -> Reply {
        Reply {
            status: 404,
            headers: vec![("Content-Length".into(), "0".into())],
            body: Body::Bytes(Vec::new()),
        }
    }

    pub fn redirect(location: &str) -> Reply {
        Reply {
            status: 302,
            headers: vec![("Location".into(), location.into()), ("Content-Length".into(), "0".into())],
            body: Body::Bytes(Vec::new()),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

type Handler = dyn Fn(&str) -> Reply + Send + Sync;

/// The server; stops accepting when dropped.
pub struct HostileServer {
    pub port: u16,
    state: Arc<State>,
}

struct State {
    stop: AtomicBool,
    /// Body bytes written to clients (what a client had to take in, or buffer).
    sent: AtomicU64,
    active: AtomicUsize,
    requests: Mutex<Vec<String>>,
}

impl HostileServer {
    pub fn start(handler: impl Fn(&str) -> Reply + Send + Sync + 'static) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(State {
            stop: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let handler: Arc<Handler> = Arc::new(handler);
        let shared = state.clone();
        std::thread::spawn(move || {
            while !shared.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        shared.active.fetch_add(1, Ordering::SeqCst);
                        let (state, handler) = (shared.clone(), handler.clone());
                        std::thread::spawn(move || {
                            serve(stream, &state, &*handler);
                            state.active.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        HostileServer { port, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until no connection is being served (a client that hung up ends its
    /// connection's writes), then returns the body bytes sent in all.
    pub fn sent_when_idle(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state.active.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "the hostile server is still sending after 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.state.sent.load(Ordering::SeqCst)
    }

    /// The paths asked for, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.requests.lock().unwrap().clone()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, state: &State, handler: &Handler) {
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 2 {
        line.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    state.requests.lock().unwrap().push(path.clone());
    let reply = handler(&path);
    let mut stream = stream;
    let mut head = format!("HTTP/1.1 {} Whatever\r\nConnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let (prefix, len) = match reply.body {
        Body::Bytes(bytes) => {
            let len = bytes.len() as u64;
            (bytes, len)
        }
        Body::Stream { prefix, len } => (prefix, len),
    };
    let mut written = 0u64;
    let filler = vec![b'a'; 64 * 1024];
    if stream.write_all(&prefix).is_err() {
        return;
    }
    written += prefix.len() as u64;
    state.sent.fetch_add(prefix.len() as u64, Ordering::SeqCst);
    while written < len {
        let chunk = (len - written).min(filler.len() as u64) as usize;
        if stream.write_all(&filler[..chunk]).is_err() {
            return; // the client hung up
        }
        written += chunk as u64;
        state.sent.fetch_add(chunk as u64, Ordering::SeqCst);
    }
}

/// An https server on 127.0.0.1 (`openssl s_server` with a throwaway CA) that answers its
/// first connection with `response`, written verbatim; killed when dropped.
pub struct TlsServer {
    pub port: u16,
    /// The CA that signed its certificate (for `HostOptions::ca_file`).
    pub ca: std::path::PathBuf,
    child: std::process::Child,
}

impl TlsServer {
    pub fn start(dir: &std::path::Path, response: &str) -> TlsServer {
        use std::process::{Command, Stdio};
        let cert = super::tls::TestCert::issue(dir, "127.0.0.1");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new("openssl")
            .args(["s_server", "-quiet", "-accept", &format!("127.0.0.1:{port}"), "-cert"])
            .arg(&cert.cert)
            .arg("-key")
            .arg(&cert.key)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // s_server relays its stdin to the first client once the handshake is done.
        child.stdin.as_mut().unwrap().write_all(response.as_bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listening(port) {
            assert!(Instant::now() < deadline, "openssl s_server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        TlsServer { port, ca: cert.ca, child }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a socket listens on 127.0.0.1:`port` (read from /proc, without connecting:
/// a probe connection would be the server's first client).
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A")
    })
}
