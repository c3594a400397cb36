//! The one request server of the workspace's daemons (the dhcp lease daemon, the
//! etcd-ipam node agent, cni-dnsd's control socket): a unix stream socket only root can
//! reach and only root is answered on, serving one request per connection.
//!
//! Whoever can talk to these daemons can make root enter namespaces, release other
//! containers' addresses or reload a resolver, so every limit below holds whatever the
//! client does:
//!
//! - **Where**: [`bind_private`] puts the socket file, mode 0600, in a directory of mode
//!   0700 owned by the daemon's user ([`crate::fs::private_dir`]): the modes are set
//!   explicitly, never taken from the umask, and the directory is what keeps other users
//!   out while the file is being created. With systemd socket activation
//!   ([`activated_listener`]) the unit's `SocketMode=` and directory decide instead.
//! - **Who**: a connection whose peer (`SO_PEERCRED`, taken by the kernel at `connect`) is
//!   not uid 0 is answered with a refusal and closed, so even a socket an administrator
//!   made reachable by others serves root only. (The clients, CNI plugins, run as root.)
//! - **How much**: a request over [`Limits::max_request`] (1 MiB) is refused as soon as
//!   that much has arrived; the rest is never read.
//! - **How long**: one deadline ([`Limits::deadline`]) for receiving the *whole* request,
//!   from the moment it is taken up, not a timeout per read: a client trickling a byte at
//!   a time is cut when the deadline passes. Sending the reply has the same allowance.
//!   The work between (acquiring a lease, an etcd transaction) is bounded by the service.
//! - **How many**: at most [`Limits::max_connections`] connections are served at once,
//!   each on its own thread (started when first needed, then kept); while all are busy
//!   the server accepts nothing more, so further clients wait in the kernel's listen
//!   queue. A service that panics loses that connection, not the thread. Threads never
//!   exceed the cap plus the accepting one, and memory held by requests never exceeds the
//!   cap times the size limit (64 MiB with the defaults).

use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The largest request any of the daemons takes: theirs are a few KiB at most.
pub const MAX_REQUEST: usize = 1 << 20;
/// The time a client has to send its whole request (and to take the whole reply).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// The bounds of a [`Server`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_request: usize,
    pub deadline: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request: MAX_REQUEST,
            deadline: DEFAULT_DEADLINE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Where a request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// At the first newline (not part of the request), or when the client shuts down
    /// its writing side.
    Line,
    /// When the client shuts down its writing side.
    UntilEof,
}

/// Why a connection got no answer from the service.
#[derive(Debug)]
pub enum Refusal {
    /// The peer is not root.
    NotRoot { uid: u32 },
    /// The request grew past the limit.
    TooLarge { limit: usize },
    /// The request was not complete by the deadline.
    Deadline { deadline: Duration },
    /// The connection failed while reading.
    Io(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotRoot { uid } => write!(f, "only root may use this socket, not uid {uid}"),
            Refusal::TooLarge { limit } => write!(f, "request larger than {limit} bytes"),
            Refusal::Deadline { deadline } => write!(f, "request not complete within {deadline:?}"),
            Refusal::Io(e) => write!(f, "reading the request: {e}"),
        }
    }
}

/// What a daemon does with requests.
pub trait Service: Send + Sync + 'static {
    /// The reply to one complete request (within the size limit, from root).
    fn handle(&self, request: Vec<u8>) -> Vec<u8>;
    /// The reply to a connection that was refused, in the daemon's protocol; `None`
    /// closes it without a word.
    fn refuse(&self, why: &Refusal) -> Option<Vec<u8>>;
}

/// A unix socket server; see the module documentation for its guarantees.
pub struct Server {
    listener: UnixListener,
    framing: Framing,
    limits: Limits,
    thread_name: String,
}

impl Server {
    /// A server of `listener` with the default limits. `thread_name` names the
    /// connection threads (at most 15 bytes are kept by the kernel).
    pub fn new(listener: UnixListener, framing: Framing, thread_name: &str) -> Server {
        Server { listener, framing, limits: Limits::default(), thread_name: thread_name.into() }
    }

    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.limits = Limits { max_connections: limits.max_connections.max(1), ..limits };
        self
    }

    /// Serves until accepting fails for good (the listener is closed); runs on the
    /// calling thread.
    pub fn serve<S: Service>(self, service: Arc<S>) -> io::Result<()> {
        let mut workers = Workers::new(service.clone(), self.framing, self.limits, &self.thread_name);
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if is_transient_accept_error(&e) => {
                    // Out of descriptors or memory: wait for connections to finish
                    // instead of spinning.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match peer_uid(&stream) {
                Ok(0) => workers.hand_over(stream),
                Ok(uid) => refuse_now(&stream, service.as_ref(), &Refusal::NotRoot { uid }),
                Err(e) => refuse_now(&stream, service.as_ref(), &Refusal::Io(e)),
            }
        }
    }
}

/// The connection threads: started as connections need them, up to the cap, and kept
/// (a thread that ended after each connection would still exist for a moment while its
/// successor starts, so the count could pass the cap). A connection is handed over on a
/// channel of no capacity, after claiming a free thread for it.
struct Workers<S> {
    service: Arc<S>,
    framing: Framing,
    limits: Limits,
    name: String,
    sender: SyncSender<UnixStream>,
    receiver: Arc<Mutex<Receiver<UnixStream>>>,
    free: Arc<FreeThreads>,
    started: usize,
}

/// How many started threads wait for a connection that no hand-over has claimed yet.
#[derive(Default)]
struct FreeThreads {
    count: Mutex<usize>,
    changed: Condvar,
}

impl FreeThreads {
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A thread done with its connection.
    fn release(&self) {
        *self.lock() += 1;
        self.changed.notify_one();
    }
}

impl<S: Service> Workers<S> {
    fn new(service: Arc<S>, framing: Framing, limits: Limits, name: &str) -> Workers<S> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(0);
        Workers {
            service,
            framing,
            limits,
            name: name.to_string(),
            sender,
            receiver: Arc::new(Mutex::new(receiver)),
            free: Arc::default(),
            started: 0,
        }
    }

    /// Gives `stream` to a thread: a free one, else a new one while under the cap, else
    /// the first to become free (meanwhile nothing more is accepted).
    fn hand_over(&mut self, stream: UnixStream) {
        let mut free = self.free.lock();
        if *free > 0 {
            *free -= 1;
        } else if self.started < self.limits.max_connections && self.start().is_ok() {
            // The new thread is this connection's; it was never counted free.
            self.started += 1;
        } else if self.started == 0 {
            // No thread, and none can be started (a process limit): the client sees its
            // connection closed.
            return;
        } else {
            free = self.free.changed.wait_while(free, |n| *n == 0).unwrap_or_else(|p| p.into_inner());
            *free -= 1;
        }
        drop(free);
        // A thread is claimed for this connection and the receiving side lives as long
        // as `self`: the send returns as soon as that thread takes it.
        let _ = self.sender.send(stream);
    }

    fn start(&self) -> io::Result<()> {
        let (service, framing, limits) = (self.service.clone(), self.framing, self.limits);
        let (receiver, free) = (self.receiver.clone(), self.free.clone());
        std::thread::Builder::new().name(self.name.clone()).spawn(move || loop {
            let next = receiver.lock().unwrap_or_else(|p| p.into_inner()).recv();
            let Ok(stream) = next else { return };
            // A service that panics loses its connection, not the thread.
            let served =
                std::panic::AssertUnwindSafe(|| serve_connection(stream, service.as_ref(), framing, limits));
            let _ = std::panic::catch_unwind(served);
            free.release();
        })?;
        Ok(())
    }
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if [
        rustix::io::Errno::MFILE.raw_os_error(),
        rustix::io::Errno::NFILE.raw_os_error(),
        rustix::io::Errno::NOBUFS.raw_os_error(),
        rustix::io::Errno::NOMEM.raw_os_error(),
        rustix::io::Errno::CONNABORTED.raw_os_error(),
        rustix::io::Errno::INTR.raw_os_error(),
    ]
    .contains(&code))
}

/// The uid of the process that connected (as the kernel recorded it at `connect`).
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(stream)?.uid.as_raw())
}

/// Sends a refusal without ever blocking the accepting thread, then closes.
fn refuse_now<S: Service + ?Sized>(stream: &UnixStream, service: &S, why: &Refusal) {
    if let Some(reply) = service.refuse(why) {
        // A fresh connection's buffer takes a short reply whole; if not, it is dropped.
        let _ = stream.set_nonblocking(true);
        let _ = (&*stream).write_all(&reply);
    }
}

fn serve_connection<S: Service + ?Sized>(
    mut stream: UnixStream,
    service: &S,
    framing: Framing,
    limits: Limits,
) {
    let reply = match read_request(&mut stream, framing, limits) {
        Ok(request) => Some(service.handle(request)),
        Err(why) => service.refuse(&why),
    };
    if let Some(reply) = reply {
        let _ = write_reply(&mut stream, &reply, limits.deadline);
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Reads one request under one deadline for all of it.
fn read_request(stream: &mut UnixStream, framing: Framing, limits: Limits) -> Result<Vec<u8>, Refusal> {
    let deadline = Instant::now() + limits.deadline;
    let mut request = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refusal::Deadline { deadline: limits.deadline });
        }
        stream.set_read_timeout(Some(left)).map_err(Refusal::Io)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Refusal::Deadline { deadline: limits.deadline })
            }
            Err(e) => return Err(Refusal::Io(e)),
        };
        if n == 0 {
            return Ok(request);
        }
        let mut piece = &chunk[..n];
        let complete = framing == Framing::Line && piece.contains(&b'\n');
        if complete {
            let end = piece.iter().position(|&b| b == b'\n').unwrap_or(piece.len());
            piece = &piece[..end];
        }
        if request.len() + piece.len() > limits.max_request {
            return Err(Refusal::TooLarge { limit: limits.max_request });
        }
        request.extend_from_slice(piece);
        if complete {
            return Ok(request);
        }
    }
}

fn write_reply(stream: &mut UnixStream, reply: &[u8], allowance: Duration) -> io::Result<()> {
    let deadline = Instant::now() + allowance;
    let mut rest = reply;
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

/// Listens on `path`, a socket file of mode 0600 in a private directory: the directory
/// is made (or tightened to) 0700 and must belong to this process's user
/// ([`crate::fs::private_dir`]). A directory other users share — world-writable, sticky,
/// or directly under `/` such as `/run` or `/tmp` — is refused rather than tightened.
///
/// A socket file left by a daemon that died is replaced; one a live daemon answers on is
/// an `AddrInUse` error, and anything else in its place (a file, a link) is refused.
pub fn bind_private(path: &Path) -> io::Result<UnixListener> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| invalid(format!("socket path {} has no directory", path.display())))?;
    refuse_shared_dir(dir)?;
    crate::fs::private_dir(dir)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is served by a running daemon", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(invalid(format!(
                "{} exists and is not a socket: refusing to replace it",
                path.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    // bind gave the file 0777 less the umask; nobody else could reach it meanwhile (the
    // directory is 0700), and now it is 0600 whatever the umask was.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn refuse_shared_dir(dir: &Path) -> io::Result<()> {
    let top_level = dir.parent().is_some_and(|p| p == Path::new("/")) || dir == Path::new("/");
    let shared = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta.permissions().mode() & 0o1002 != 0,
        Err(_) => false,
    };
    if top_level || shared {
        return Err(invalid(format!(
            "socket directory {} is shared with other users: give the socket a directory of its own",
            dir.display()
        )));
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Whether this process already took the socket systemd passed.
static ACTIVATION_TAKEN: AtomicBool = AtomicBool::new(false);

/// The listening socket systemd passed to this process (`LISTEN_PID` is ours and
/// `LISTEN_FDS` at least 1: fd 3), if any. Taken once per process; fd 3 must be a unix
/// stream socket in the listening state, anything else is an error rather than served.
pub fn activated_listener() -> io::Result<Option<UnixListener>> {
    let ours =
        std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
    if !ours || count < 1 || ACTIVATION_TAKEN.swap(true, Ordering::SeqCst) {
        return Ok(None);
    }
    let listener = adopt_fd3();
    let listening_unix_stream = || -> io::Result<bool> {
        use rustix::net::{sockopt, AddressFamily, SocketType};
        Ok(sockopt::socket_acceptconn(&listener)?
            && sockopt::socket_domain(&listener)? == AddressFamily::UNIX
            && sockopt::socket_type(&listener)? == SocketType::STREAM)
    };
    match listening_unix_stream() {
        Ok(true) => Ok(Some(listener)),
        Ok(false) => Err(invalid("fd 3 from systemd is not a listening unix stream socket".into())),
        Err(e) => Err(invalid(format!("fd 3 from systemd is not a listening unix stream socket ({e})"))),
    }
}

#[allow(unsafe_code)]
fn adopt_fd3() -> UnixListener {
    use std::os::fd::FromRawFd;
    // SAFETY: systemd passed fd 3 to this process (LISTEN_PID names it) and nothing else
    // in the process owns it; ACTIVATION_TAKEN makes sure it is adopted once only.
    unsafe { UnixListener::from_raw_fd(3) }
}

#[cfg(test)]
mod tests;
