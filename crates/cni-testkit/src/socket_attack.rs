//! Attacks on a daemon's unix request socket (see `cni_os::socket`), shared by the tests
//! of every daemon that serves one: a local unprivileged user connecting, an oversized
//! request, slow-loris clients; and the daemon's own account of what that cost it
//! (threads, peak memory, from /proc).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::unprivileged::command_as_nobody;

pub use crate::unprivileged::NOBODY;

/// What an unprivileged client got from the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NobodySaw {
    /// `connect` failed with this errno name (e.g. `EACCES`).
    ConnectFailed(String),
    /// The daemon's answer (possibly empty: closed without a word).
    Reply(String),
}

/// Connects to `socket` as `nobody:nogroup` with no supplementary groups, sends
/// `request`, shuts down its writing side and reads the answer. The client is Python
/// (`/usr/bin/python3`) run under util-linux's `setpriv`, so nothing of root's survives
/// in it: its credentials are what the kernel records for `SO_PEERCRED`.
pub fn exchange_as_nobody(socket: &Path, request: &str) -> NobodySaw {
    const CLIENT: &str = r#"
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect-failed:" + errno.errorcode.get(e.errno, str(e.errno)))
    sys.exit(0)
try:
    s.sendall(sys.argv[2].encode())
    s.shutdown(socket.SHUT_WR)
except OSError:
    pass
data = b""
while True:
    try:
        chunk = s.recv(65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
print("reply:" + data.decode(errors="replace"), end="")
"#;
    let out = command_as_nobody("/usr/bin/python3")
        .args(["-c", CLIENT])
        .arg(socket)
        .arg(request)
        .output()
        .expect("setpriv (util-linux) and /usr/bin/python3 run");
    assert!(out.status.success(), "the client as nobody failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(errno) = text.strip_prefix("connect-failed:") {
        NobodySaw::ConnectFailed(errno.trim().to_string())
    } else {
        NobodySaw::Reply(text.strip_prefix("reply:").unwrap_or(&text).to_string())
    }
}

/// Sends a request of `size` bytes (`x` repeated: no newline, and never ended) and returns
/// whatever the daemon answered before closing. The bytes are written from a thread out
/// of one small buffer, so the test itself stays small; a write failing because the
/// daemon closed is the expected end.
pub fn send_oversized(socket: &Path, size: usize) -> String {
    let stream = UnixStream::connect(socket).expect("connect");
    let mut writer = stream.try_clone().expect("clone the stream");
    let sender = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        let mut sent = 0;
        while sent < size {
            let n = chunk.len().min(size - sent);
            if writer.write_all(&chunk[..n]).is_err() {
                break;
            }
            sent += n;
        }
        sent
    });
    let mut reply = Vec::new();
    let _ = (&stream).read_to_end(&mut reply);
    let sent = sender.join().expect("the sender");
    assert!(sent < size, "the daemon read all {size} bytes");
    String::from_utf8_lossy(&reply).into_owned()
}

/// A line of `/proc/<pid>/status` as a number (`Threads`, `VmHWM` in KiB, ...).
pub fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Slow-loris clients: each connects, then sends one byte every `every`, never a whole
/// request, until the daemon cuts it (a write fails) or the attack is stopped.
pub struct SlowLoris {
    stop: Arc<AtomicBool>,
    connected: Arc<AtomicUsize>,
    cut: Arc<AtomicUsize>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl SlowLoris {
    /// Starts `count` clients of `socket`. Connecting may wait while the daemon serves
    /// as many as it will (the rest queue in the kernel), so each client has a thread.
    pub fn start(socket: &Path, count: usize, every: Duration) -> SlowLoris {
        let stop = Arc::new(AtomicBool::new(false));
        let connected = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(AtomicUsize::new(0));
        let clients = (0..count)
            .map(|_| {
                let (socket, stop, connected, cut) =
                    (socket.to_path_buf(), stop.clone(), connected.clone(), cut.clone());
                std::thread::spawn(move || {
                    let Ok(mut stream) = UnixStream::connect(&socket) else { return };
                    connected.fetch_add(1, Ordering::SeqCst);
                    while !stop.load(Ordering::SeqCst) {
                        if stream.write_all(b"{").is_err() {
                            cut.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        let mut slept = Duration::ZERO;
                        while slept < every && !stop.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(50));
                            slept += Duration::from_millis(50);
                        }
                    }
                })
            })
            .collect();
        SlowLoris { stop, connected, cut, clients }
    }

    /// Clients connected so far.
    pub fn connected(&self) -> usize {
        self.connected.load(Ordering::SeqCst)
    }

    /// Clients the daemon has cut off so far.
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }

    /// Stops every client (closing its connection) and waits for them.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for client in self.clients.drain(..) {
            let _ = client.join();
        }
    }
}

impl Drop for SlowLoris {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `program args...` started with umask 000 (through `sh`, which then `exec`s it, so the
/// child's pid is the daemon's): a daemon must not take its socket's mode from the umask.
pub fn command_under_umask_000(program: &Path) -> Command {
    let mut command = Command::new("/bin/sh");
    command.args(["-c", "umask 000; exec \"$0\" \"$@\""]).arg(program);
    command
}

/// A daemon to attack: its binary started under umask 000 with its socket (and whatever
/// else it keeps) in a temp dir of its own, its output discarded; killed and reaped when
/// dropped, also when the test panics.
pub struct UmaskDaemon {
    child: Child,
    /// Where it answers requests.
    pub socket: PathBuf,
    /// The temp dir its paths are in.
    pub dir: tempfile::TempDir,
}

impl UmaskDaemon {
    /// Starts `program` with the arguments `args` gives for the temp dir (named after
    /// `dir_prefix`) and waits until it answers on `socket_in_dir` there.
    pub fn start(
        program: &Path,
        dir_prefix: &str,
        socket_in_dir: &str,
        args: impl FnOnce(&Path) -> Vec<OsString>,
    ) -> UmaskDaemon {
        let dir = tempfile::Builder::new().prefix(dir_prefix).tempdir().expect("create a temp dir");
        let socket = dir.path().join(socket_in_dir);
        let child = command_under_umask_000(program)
            .args(args(dir.path()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let daemon = UmaskDaemon { child, socket, dir };
        wait_for_socket(&daemon.socket);
        daemon
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for UmaskDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to [`EVENTUALLY`](crate::poll::EVENTUALLY)) until a daemon answers
/// connections on `socket`.
pub fn wait_for_socket(socket: &Path) {
    let what = format!("something answers on {}", socket.display());
    crate::poll::until(&what, crate::poll::EVENTUALLY, || UnixStream::connect(socket).is_ok());
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).expect("stat").mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The socket of a daemon started under umask 000 is 0600 in a 0700 directory (whose
/// parent, if the daemon made it, is not writable by others either), so
/// `nobody` cannot even connect; and when an administrator opens both up anyway, the
/// daemon still answers `nobody` only with a refusal (its peer check), never with the
/// result of `request`. Returns that refusal.
pub fn assert_root_only(socket: &Path, request: &str) -> String {
    let dir = socket.parent().expect("the socket has a directory");
    assert_eq!(mode_of(socket), 0o600, "the socket's mode");
    assert_eq!(mode_of(dir), 0o700, "the socket directory's mode");
    let above = dir.parent().expect("the socket directory has a parent");
    assert_eq!(
        mode_of(above) & 0o022,
        0,
        "{} is writable by others: our directory could be swapped",
        above.display()
    );
    assert_eq!(
        exchange_as_nobody(socket, request),
        NobodySaw::ConnectFailed("EACCES".into()),
        "nobody reached the socket"
    );
    set_mode(dir, 0o755);
    set_mode(socket, 0o666);
    let seen = exchange_as_nobody(socket, request);
    set_mode(socket, 0o600);
    set_mode(dir, 0o700);
    match seen {
        NobodySaw::Reply(reply) => {
            assert!(reply.contains("only root may use this socket, not uid 65534"), "{reply:?}");
            reply
        }
        other => panic!("nobody could not connect to an open socket: {other:?}"),
    }
}

/// A request of 512 MiB gets the daemon's size refusal after at most its limit was
/// read; the daemon's peak memory stays under `max_peak_kib`. Returns the refusal.
pub fn assert_oversized_refused(pid: u32, socket: &Path, max_peak_kib: u64) -> String {
    let reply = send_oversized(socket, 512 << 20);
    assert!(reply.contains("larger than 1048576 bytes"), "{reply:?}");
    let peak = proc_status(pid, "VmHWM");
    assert!(peak <= max_peak_kib, "peak memory {peak} KiB after a 512 MiB request");
    eprintln!("measured: peak memory {peak} KiB after a 512 MiB request");
    reply
}

/// 300 slow-loris clients (one byte every `every`, the request never complete): the
/// daemon's thread count never rises more than `cap` above where it was, and the clients
/// it takes up are cut off by its deadline (at least `cap` of them, before the attack
/// ends); `served` (a complete request answered) holds before the attack and after it.
/// Returns the most threads seen.
///
/// The baseline is taken only once `served` held: a daemon may listen before it has
/// started its own threads (the socket accepts into its backlog meanwhile), and a
/// baseline counted then would charge those threads to the attack.
pub fn assert_slow_loris_bounded(
    pid: u32,
    socket: &Path,
    every: Duration,
    cap: usize,
    served: impl Fn() -> bool,
) -> u64 {
    assert!(served(), "the daemon answers a request before the attack");
    let before = proc_status(pid, "Threads");
    let attack = SlowLoris::start(socket, 300, every);
    let mut most = before;
    // Time enough for a few deadlines; the loop ends as soon as `cap` clients are cut.
    for _ in 0..1200 {
        most = most.max(proc_status(pid, "Threads"));
        if attack.cut() >= cap {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (connected, cut) = (attack.connected(), attack.cut());
    attack.stop();
    assert!(cut >= cap, "only {cut} of {connected} slow clients were cut off");
    assert!(most <= before + cap as u64, "threads rose from {before} to {most} (cap {cap})");
    eprintln!("measured: threads {before} before, {most} at most under 300 slow clients; {cut} cut");
    assert!(served(), "the daemon answers again once the slow clients are gone");
    most
}
