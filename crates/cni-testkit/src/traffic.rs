//! Real traffic between test namespaces: TCP and UDP echo servers and clients.
//!
//! Sockets are created inside a namespace (on a [`NetNs::run`] thread) and keep belonging to
//! it, so the server threads and the client I/O need no namespace switching. Use these only
//! with addresses inside namespaces the test created itself.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cni_net::NetNs;

/// Largest payload echoed back; bigger requests are cut off (keeps servers bounded).
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// How long a server waits on one client before dropping it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often server loops look at their stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Why an echo check failed.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error("cannot enter namespace: {0}")]
    Namespace(#[from] cni_net::Error),
    #[error("{op} {addr}: {source}")]
    Io {
        op: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("echo from {addr} differs: sent {sent} bytes, got {received} bytes back")]
    Mismatch { addr: SocketAddr, sent: usize, received: usize },
}

fn io_error(op: &'static str, addr: SocketAddr) -> impl FnOnce(io::Error) -> TrafficError {
    move |source| TrafficError::Io { op, addr, source }
}

/// An echo server running in a background thread; stops (and joins) when dropped.
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    /// The address the server is bound to (with the real port if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts a TCP echo server bound to `addr` inside `ns` (port 0 picks a free port).
/// Each connection is read to EOF (at most [`MAX_PAYLOAD`] bytes) and answered with the same
/// bytes; connections are served one at a time.
pub fn tcp_echo_server(ns: &NetNs, addr: SocketAddr) -> Result<EchoServer, TrafficError> {
    let listener = ns.run(|| TcpListener::bind(addr))?.map_err(io_error("bind TCP", addr))?;
    let local = listener.local_addr().map_err(io_error("bind TCP", addr))?;
    listener.set_nonblocking(true).map_err(io_error("bind TCP", addr))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = stop.clone();
    let thread = std::thread::spawn(move || {
        while !stop_flag.load(Ordering::SeqCst) {
            if !readable(&listener, STOP_POLL) {
                continue;
            }
            if let Ok((stream, _)) = listener.accept() {
                let _ = echo_tcp_connection(stream);
            }
        }
    });
    Ok(EchoServer { addr: local, stop, thread: Some(thread) })
}

fn echo_tcp_connection(stream: TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut received = Vec::new();
    (&stream).take(MAX_PAYLOAD as u64).read_to_end(&mut received)?;
    (&stream).write_all(&received)?;
    stream.shutdown(Shutdown::Both)
}

/// Connects from inside `ns` to `addr`, sends `payload`, and checks the same bytes come back
/// within `timeout`.
pub fn tcp_echo(ns: &NetNs, addr: SocketAddr, payload: &[u8], timeout: Duration) -> Result<(), TrafficError> {
    let stream =
        ns.run(|| TcpStream::connect_timeout(&addr, timeout))?.map_err(io_error("connect TCP", addr))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_error("configure TCP", addr))?;
    (&stream).write_all(payload).map_err(io_error("send TCP", addr))?;
    stream.shutdown(Shutdown::Write).map_err(io_error("send TCP", addr))?;
    let mut received = Vec::new();
    (&stream).read_to_end(&mut received).map_err(io_error("receive TCP", addr))?;
    check_echo(addr, payload, &received)
}

/// Starts a UDP echo server bound to `addr` inside `ns`: every datagram is sent back to its
/// sender.
pub fn udp_echo_server(ns: &NetNs, addr: SocketAddr) -> Result<EchoServer, TrafficError> {
    let socket = ns.run(|| UdpSocket::bind(addr))?.map_err(io_error("bind UDP", addr))?;
    let local = socket.local_addr().map_err(io_error("bind UDP", addr))?;
    socket.set_read_timeout(Some(STOP_POLL)).map_err(io_error("bind UDP", addr))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut buffer = vec![0u8; MAX_PAYLOAD];
        while !stop_flag.load(Ordering::SeqCst) {
            if let Ok((len, peer)) = socket.recv_from(&mut buffer) {
                let _ = socket.send_to(&buffer[..len], peer);
            }
        }
    });
    Ok(EchoServer { addr: local, stop, thread: Some(thread) })
}

/// Sends one datagram from inside `ns` to `addr` and checks it is echoed within `timeout`.
pub fn udp_echo(ns: &NetNs, addr: SocketAddr, payload: &[u8], timeout: Duration) -> Result<(), TrafficError> {
    let any: SocketAddr =
        if addr.is_ipv4() { "0.0.0.0:0".parse().expect("valid") } else { "[::]:0".parse().expect("valid") };
    let socket = ns.run(|| UdpSocket::bind(any))?.map_err(io_error("bind UDP", any))?;
    socket
        .connect(addr)
        .and_then(|()| socket.set_read_timeout(Some(timeout)))
        .map_err(io_error("connect UDP", addr))?;
    socket.send(payload).map_err(io_error("send UDP", addr))?;
    let mut buffer = vec![0u8; MAX_PAYLOAD];
    let len = socket.recv(&mut buffer).map_err(io_error("receive UDP", addr))?;
    check_echo(addr, payload, &buffer[..len])
}

fn check_echo(addr: SocketAddr, sent: &[u8], received: &[u8]) -> Result<(), TrafficError> {
    if sent == received {
        Ok(())
    } else {
        Err(TrafficError::Mismatch { addr, sent: sent.len(), received: received.len() })
    }
}

/// Waits up to `timeout` for a listener to have a pending connection.
fn readable(listener: &TcpListener, timeout: Duration) -> bool {
    cni_os::poll::readable(listener, timeout).unwrap_or(false)
}
