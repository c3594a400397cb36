//! A fake etcd member on 127.0.0.1 that answers every request with the same hostile bytes
//! (a huge `Content-Length`, an absurd chunk size, an endless header line...), for tests
//! proving that the client turns such answers into errors instead of allocating what the
//! server asks for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The server; dropping it stops the accepting thread.
pub struct HostileServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Reads what the client sends (up to a short pause), so the answer comes after the request
/// as a real server's would.
fn drain_request(stream: &mut TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 || buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
}

/// What follows the answer: `tail` over and over, each time after `pause`.
#[derive(Clone)]
struct Tail {
    bytes: Vec<u8>,
    pause: Duration,
}

fn serve(stream: &mut TcpStream, answer: &[u8], tail: Option<&Tail>, stop: &AtomicBool) {
    drain_request(stream);
    if stream.write_all(answer).is_err() {
        return;
    }
    // An endless tail (e.g. header bytes without a newline): written until the client
    // hangs up, bounded so a client that keeps reading cannot keep the test running.
    if let Some(tail) = tail {
        for _ in 0..(64 << 20) / tail.bytes.len().max(1) {
            std::thread::sleep(tail.pause);
            if stop.load(Ordering::SeqCst) || stream.write_all(&tail.bytes).is_err() {
                return;
            }
        }
    }
}

impl HostileServer {
    /// Answers every request on every connection with `answer`, then closes.
    pub fn start(answer: &[u8]) -> HostileServer {
        HostileServer::launch(answer.to_vec(), None)
    }

    /// Answers with `answer` followed by `tail` over and over (up to 64 MiB), then closes.
    pub fn start_endless(answer: &[u8], tail: &[u8]) -> HostileServer {
        HostileServer::launch(answer.to_vec(), Some(Tail { bytes: tail.to_vec(), pause: Duration::ZERO }))
    }

    /// [`HostileServer::start_endless`] with `pause` before each `tail`: a member
    /// trickling its answer, each byte in time for the client's read timeout.
    pub fn start_trickle(answer: &[u8], tail: &[u8], pause: Duration) -> HostileServer {
        HostileServer::launch(answer.to_vec(), Some(Tail { bytes: tail.to_vec(), pause }))
    }

    fn launch(answer: Vec<u8>, tail: Option<Tail>) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the hostile server");
        let addr = listener.local_addr().expect("its address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                serve(&mut stream, &answer, tail.as_ref(), &stopping);
            }
        });
        HostileServer { addr, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`, as an etcd endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
