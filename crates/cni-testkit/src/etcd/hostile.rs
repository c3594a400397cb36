//! A fake etcd member on 127.0.0.1 that answers every gRPC call the same hostile way (a
//! message length no one should allocate, bytes trickled one at a time, garbage instead of
//! HTTP/2, silence...), for tests proving that the client turns such answers into bounded
//! errors instead of allocating, hanging or panicking.
//!
//! It speaks just enough HTTP/2 by hand (RFC 9113; headers as HPACK literals), so that
//! nothing of the client's own stack is trusted to play the attacker: every byte it sends
//! is written here.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How the member answers each call.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// Accepts connections, reads what comes and never answers.
    Silent,
    /// Answers a gRPC message whose length prefix claims 1 GB, and nothing more.
    ClaimsHugeMessage,
    /// Answers with a message of 9 MiB (over the client's 8 MiB limit), as much of it as
    /// HTTP/2 flow control lets through.
    Oversized,
    /// Answers a message announced as 1,000 bytes one byte at a time, each after this
    /// pause: every read is in time, only the whole answer is late.
    Trickle(Duration),
    /// Answers with an HTTP/1.1 response instead of HTTP/2.
    Garbage,
    /// Answers with a header whose value is announced as 64 MiB long, sent in CONTINUATION
    /// frames that never end the header block.
    EndlessHeaders,
    /// Answers the start of a message and closes the connection.
    ClosesMidAnswer,
    /// Answers with this gRPC status code and message (no message body).
    Status(u32, String),
    /// Answers with this message (protobuf bytes) and status OK.
    Answer(Vec<u8>),
    /// Answers this message without ending the call (the start of a stream, such as a
    /// watch's "created"), then vanishes without closing the connection: it reads what
    /// comes and never answers again, not even HTTP/2 pings (a crashed machine, a cut link).
    AnswersThenVanishes(Vec<u8>),
}

/// The member; dropping it stops the accepting thread and every connection's.
pub struct HostileMember {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// The largest frame payload a peer must accept without asking (SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = 16 * 1024;
/// What the client lets a stream receive before it grants more (hyper's default window).
const FLOW_WINDOW: usize = 2 * 1024 * 1024;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len() as u32;
    let mut bytes = length.to_be_bytes()[1..].to_vec();
    bytes.extend([kind, flags]);
    bytes.extend(stream.to_be_bytes());
    bytes.extend(payload);
    bytes
}

/// An HPACK integer with an `N`-bit prefix (RFC 7541, 5.1), the prefix bits clear.
fn hpack_integer(value: usize, prefix_bits: u32, out: &mut Vec<u8>) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// A header block: `:status: 200` (static table entry 8), then literal fields.
fn header_block(status_200: bool, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    if status_200 {
        block.push(0x88);
    }
    for (name, value) in fields {
        // A literal field without indexing, with a new name, neither Huffman-coded.
        block.push(0);
        hpack_integer(name.len(), 7, &mut block);
        block.extend(name.as_bytes());
        hpack_integer(value.len(), 7, &mut block);
        block.extend(value.as_bytes());
    }
    block
}

fn response_headers(stream: u32) -> Vec<u8> {
    frame(HEADERS, END_HEADERS, stream, &header_block(true, &[("content-type", "application/grpc")]))
}

fn trailers(stream: u32, code: u32, message: &str) -> Vec<u8> {
    let code = code.to_string();
    let block = header_block(false, &[("grpc-status", &code), ("grpc-message", message)]);
    frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
}

/// The 5-byte gRPC prefix: not compressed, then the message's length.
fn message_prefix(length: u32) -> Vec<u8> {
    let mut prefix = vec![0];
    prefix.extend(length.to_be_bytes());
    prefix
}

/// Data frames carrying `bytes`, none over the frame size.
fn data_frames(stream: u32, bytes: &[u8]) -> Vec<u8> {
    bytes.chunks(MAX_FRAME).flat_map(|chunk| frame(DATA, 0, stream, chunk)).collect()
}

/// A protobuf varint.
fn varint(mut value: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    while value >= 0x80 {
        bytes.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
    bytes
}

/// Waits up to a short while for the next byte: false when none came (the caller checks
/// whether to stop), an error when the connection ended.
fn readable(stream: &TcpStream) -> io::Result<bool> {
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let peeked = stream.peek(&mut [0u8; 1]);
    // The rest of a frame that has started comes at once from a client.
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    match peeked {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(_) => Ok(true),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads one frame: its type, flags, stream and payload.
fn read_frame(stream: &mut TcpStream) -> io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head)?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; length.min(1 << 20)];
    stream.read_exact(&mut payload)?;
    Ok((head[3], head[4], id, payload))
}

/// Reads until `stop`, ignoring what comes: a member that never answers.
fn stay_silent(stream: &mut TcpStream, stop: &AtomicBool) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Answers call `id` the `hostility` way; false when the connection is to close.
fn answer(stream: &mut TcpStream, id: u32, hostility: &Hostility, stop: &AtomicBool) -> io::Result<bool> {
    match hostility {
        Hostility::Silent | Hostility::Garbage => unreachable!("answered before HTTP/2"),
        Hostility::ClaimsHugeMessage => {
            stream.write_all(
                &[response_headers(id), data_frames(id, &message_prefix(1_000_000_000))].concat(),
            )?;
        }
        Hostility::Oversized => {
            // A valid message of 9 MiB: one bytes field (tag 1) of 9 MiB less its tag and
            // 4-byte length, of which the flow control window lets the start through.
            let size: u32 = 9 * 1024 * 1024;
            let mut bytes = message_prefix(size);
            bytes.push(0x0a);
            bytes.extend(varint(size - 5));
            bytes.resize(FLOW_WINDOW - 1024, b'x');
            stream.write_all(&[response_headers(id), data_frames(id, &bytes)].concat())?;
        }
        Hostility::Trickle(pause) => {
            stream.write_all(&[response_headers(id), data_frames(id, &message_prefix(1000))].concat())?;
            for _ in 0..1000 {
                std::thread::sleep(*pause);
                if stop.load(Ordering::SeqCst) {
                    return Ok(false);
                }
                stream.write_all(&frame(DATA, 0, id, &[0x0a]))?;
            }
        }
        Hostility::EndlessHeaders => {
            let mut block = vec![0x88, 0];
            hpack_integer(6, 7, &mut block);
            block.extend(b"x-junk");
            hpack_integer(64 << 20, 7, &mut block);
            stream.write_all(&frame(HEADERS, 0, id, &block))?;
            let fragment = vec![b'a'; MAX_FRAME];
            for _ in 0..(64 << 20) / MAX_FRAME {
                if stop.load(Ordering::SeqCst) {
                    return Ok(false);
                }
                stream.write_all(&frame(CONTINUATION, 0, id, &fragment))?;
            }
            return Ok(false);
        }
        Hostility::ClosesMidAnswer => {
            let bytes = [message_prefix(10), vec![0x0a, 0x08, b'h']].concat();
            stream.write_all(&[response_headers(id), data_frames(id, &bytes)].concat())?;
            return Ok(false);
        }
        Hostility::Status(code, message) => {
            let block = header_block(
                true,
                &[
                    ("content-type", "application/grpc"),
                    ("grpc-status", &code.to_string()),
                    ("grpc-message", message),
                ],
            );
            stream.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, id, &block))?;
        }
        Hostility::AnswersThenVanishes(message) => {
            let body = [message_prefix(message.len() as u32), message.clone()].concat();
            stream.write_all(&[response_headers(id), data_frames(id, &body)].concat())?;
            stay_silent(stream, stop);
            return Ok(false);
        }
        Hostility::Answer(message) => {
            let body = [message_prefix(message.len() as u32), message.clone()].concat();
            stream
                .write_all(&[response_headers(id), data_frames(id, &body), trailers(id, 0, "")].concat())?;
        }
    }
    Ok(true)
}

fn serve(mut stream: TcpStream, hostility: &Hostility, stop: &AtomicBool) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    if let Hostility::Silent = hostility {
        stay_silent(&mut stream, stop);
        return Ok(());
    }
    if let Hostility::Garbage = hostility {
        let mut buf = [0u8; 64];
        let _ = stream.read(&mut buf);
        return stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    }
    let mut preface = [0u8; 24];
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.read_exact(&mut preface)?;
    if preface != PREFACE {
        return Ok(());
    }
    stream.write_all(&frame(SETTINGS, 0, 0, &[]))?;
    while !stop.load(Ordering::SeqCst) {
        if !readable(&stream)? {
            continue;
        }
        let (kind, flags, id, payload) = read_frame(&mut stream)?;
        match kind {
            SETTINGS if flags & ACK == 0 => stream.write_all(&frame(SETTINGS, ACK, 0, &[]))?,
            PING if flags & ACK == 0 => stream.write_all(&frame(PING, ACK, 0, &payload))?,
            HEADERS if !answer(&mut stream, id, hostility, stop)? => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

impl HostileMember {
    /// Answers every call on every connection the `hostility` way.
    pub fn start(hostility: Hostility) -> HostileMember {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the hostile member");
        let addr = listener.local_addr().expect("its address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut connections = Vec::new();
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (hostility, stop) = (hostility.clone(), stopping.clone());
                connections.push(std::thread::spawn(move || {
                    let _ = serve(stream, &hostility, &stop);
                }));
            }
            for connection in connections {
                let _ = connection.join();
            }
        });
        HostileMember { addr, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`, as an etcd endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for HostileMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
