use super::*;
use std::os::unix::fs::MetadataExt;

struct Echo;

impl Service for Echo {
    fn handle(&self, request: Vec<u8>) -> Vec<u8> {
        assert_ne!(request, b"panic", "a service that panics");
        [b"ok ".as_slice(), &request, b"\n"].concat()
    }
    fn refuse(&self, why: &Refusal) -> Option<Vec<u8>> {
        Some(format!("error {why}\n").into_bytes())
    }
}

fn serve(path: &Path, framing: Framing, limits: Limits) {
    let listener = bind_private(path).unwrap();
    let server = Server::new(listener, framing, "cni-os-test").with_limits(limits);
    std::thread::spawn(move || server.serve(Arc::new(Echo)));
}

fn ask(path: &Path, request: &[u8]) -> String {
    let mut stream = UnixStream::connect(path).unwrap();
    stream.write_all(request).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn a_line_is_one_request_and_the_socket_is_private() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("d/s.sock");
    serve(&path, Framing::Line, Limits::default());
    assert_eq!(ask(&path, b"hello\nignored"), "ok hello\n");
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn a_request_over_the_limit_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    serve(&path, Framing::UntilEof, Limits { max_request: 10, ..Limits::default() });
    assert_eq!(ask(&path, b"0123456789"), "ok 0123456789\n");
    assert_eq!(ask(&path, b"0123456789a"), "error request larger than 10 bytes\n");
}

#[test]
fn the_deadline_covers_the_whole_request() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    let deadline = Duration::from_millis(300);
    serve(&path, Framing::Line, Limits { deadline, ..Limits::default() });
    let mut stream = UnixStream::connect(&path).unwrap();
    // Each byte arrives well within the deadline; all of them together never do.
    let mut cut_after = None;
    for sent in 0..100 {
        if stream.write_all(b"x").is_err() {
            cut_after = Some(sent);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(cut_after.is_some(), "a trickling client was never cut");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    assert!(reply.starts_with("error request not complete within"), "{reply:?}");
}

#[test]
fn something_else_in_the_sockets_place_is_not_replaced() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    std::fs::write(&path, "precious").unwrap();
    let err = bind_private(&path).unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[test]
fn a_live_socket_is_not_taken_over_and_a_dead_one_is() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    let first = bind_private(&path).unwrap();
    assert_eq!(bind_private(&path).unwrap_err().kind(), io::ErrorKind::AddrInUse);
    drop(first);
    bind_private(&path).unwrap();
}

#[test]
fn shared_directories_are_refused() {
    assert!(bind_private(Path::new("/run/x.sock")).is_err());
    let root = tempfile::tempdir().unwrap();
    let sticky = root.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let err = bind_private(&sticky.join("s.sock")).unwrap_err();
    assert!(err.to_string().contains("shared with other users"), "{err}");
    assert_eq!(std::fs::metadata(&sticky).unwrap().mode() & 0o7777, 0o1777, "left as it was");
}

#[test]
fn a_socket_directory_another_user_owns_is_refused() {
    assert!(crate::is_root(), "this test needs root (it chowns a directory to nobody)");
    let root = tempfile::tempdir().unwrap();
    let theirs = root.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let err = bind_private(&theirs.join("s.sock")).unwrap_err();
    assert!(err.to_string().contains("owned by uid 65534"), "{err}");
    assert!(std::fs::read_dir(&theirs).unwrap().next().is_none(), "nothing was bound in it");
}

/// The server threads of this test process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .count()
}

#[test]
fn every_slow_client_is_cut_and_threads_never_pass_the_cap() {
    use std::sync::atomic::AtomicUsize;
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    let limits = Limits { deadline: Duration::from_millis(100), max_connections: 8, ..Limits::default() };
    let listener = bind_private(&path).unwrap();
    let server = Server::new(listener, Framing::Line, "cni-os-loris").with_limits(limits);
    std::thread::spawn(move || server.serve(Arc::new(Echo)));
    let cut = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..300)
        .map(|_| {
            let (path, cut) = (path.clone(), cut.clone());
            std::thread::spawn(move || {
                let mut stream = UnixStream::connect(&path).unwrap();
                // Never a whole line: a byte every 30 ms until the server hangs up
                // (the bound on tries only keeps a broken server from hanging the test).
                for _ in 0..2000 {
                    if stream.write_all(b"x").is_err() {
                        cut.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(30));
                }
            })
        })
        .collect();
    let mut most = 0;
    while clients.iter().any(|c| !c.is_finished()) {
        most = most.max(threads_named("cni-os-loris"));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(cut.load(Ordering::SeqCst), 300, "every slow client is cut off");
    assert!(most <= 8, "{most} connection threads for a cap of 8");
    assert!(most > 0, "the sampling saw the server's threads at all");
}

#[test]
fn a_panicking_service_loses_the_connection_not_the_thread() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    serve(&path, Framing::Line, Limits { max_connections: 1, ..Limits::default() });
    assert_eq!(ask(&path, b"panic\n"), "", "closed without an answer");
    // With a cap of one thread, an answer now means that thread lived on.
    assert_eq!(ask(&path, b"after\n"), "ok after\n");
}

/// Answers "together" once `expected` requests are being handled at the same time,
/// "alone" if that never happens; ready for the next round once all have left.
struct Gathering {
    /// (requests inside, whether they all gathered this round)
    state: std::sync::Mutex<(usize, bool)>,
    arrived: std::sync::Condvar,
    expected: usize,
}

impl Service for Gathering {
    fn handle(&self, _: Vec<u8>) -> Vec<u8> {
        let mut state = self.state.lock().unwrap();
        state.0 += 1;
        if state.0 == self.expected {
            state.1 = true;
            self.arrived.notify_all();
        }
        let mut state = self.arrived.wait_timeout_while(state, Duration::from_secs(20), |s| !s.1).unwrap().0;
        let together = state.1;
        state.0 -= 1;
        if state.0 == 0 {
            state.1 = false;
        }
        if together {
            b"together".to_vec()
        } else {
            b"alone".to_vec()
        }
    }
    fn refuse(&self, _: &Refusal) -> Option<Vec<u8>> {
        None
    }
}

#[test]
fn as_many_connections_as_the_cap_are_served_at_once() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("s.sock");
    let listener = bind_private(&path).unwrap();
    let limits = Limits { max_connections: 8, ..Limits::default() };
    let service = Arc::new(Gathering { state: Default::default(), arrived: Default::default(), expected: 8 });
    let server = Server::new(listener, Framing::Line, "cni-os-gather").with_limits(limits);
    std::thread::spawn(move || server.serve(service));
    for round in 0..3 {
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || ask(&path, b"hi\n"))
            })
            .collect();
        for client in clients {
            assert_eq!(client.join().unwrap(), "together", "round {round}: fewer than 8 served at once");
        }
    }
}
