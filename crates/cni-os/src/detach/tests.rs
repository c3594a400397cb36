//! The helper itself, started directly (no opt-in needed): it does its job, closes every
//! descriptor but its own early, leaves this process's memory as it was, unmaps its
//! mapping and exits; with `close_range` refused as well.
//!
//! The checks run in a child process of the test binary with one test thread: whether a
//! range is still mapped after the helper exits says something only if no other thread
//! can map memory meanwhile. Needs no root.

use super::helper::{self, Work};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Tells the child run which scenario to run.
const MODE_VAR: &str = "CNI_NET_DETACH_TEST_MODE";

#[test]
fn the_helper_keeps_to_its_job_its_descriptors_and_its_memory() {
    run_child("with close_range");
}

#[test]
fn without_close_range_the_helper_closes_descriptors_one_by_one() {
    run_child("close_range refused");
}

/// Runs [`child`] in a new process of this test binary, with `mode`.
fn run_child(mode: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "detach::tests::child", "--ignored", "--test-threads=1", "--nocapture"])
        .env(MODE_VAR, mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child ({mode}) failed: {}\n{stdout}\n{stderr}", out.status);
    // A filter that matched nothing would pass too.
    assert!(stdout.contains("1 passed"), "child ({mode}) ran no test:\n{stdout}\n{stderr}");
}

#[test]
#[ignore = "the child half of the two tests above; they run it"]
fn child() {
    let mode = std::env::var(MODE_VAR).expect("run by the tests above, with MODE_VAR set");
    if mode == "close_range refused" {
        refuse_close_range();
    }
    let canaries = Canaries::new();
    a_waiting_helper();
    a_sending_helper();
    canaries.check();
}

/// A waiting helper: closes the descriptors it does not keep as it starts, keeps its own
/// until released, runs in a mapping with a guard page, then unmaps it and exits.
fn a_waiting_helper() {
    let (ours, theirs) = socket_pair();
    let (wait_end, release_end) = pipe();
    let (probe_read, probe_write) = pipe();
    let work = Work::CloseAfterEof { wait_end: wait_end.as_raw_fd(), on_tick: false };
    let our_mask = signal_mask("thread-self");
    let spawned = helper::spawn(theirs.as_raw_fd(), work).expect("helper started");
    let killer = KillOnFailure(spawned.pid);
    drop((theirs, wait_end, probe_write));
    // Every signal is blocked in the helper (the kernel leaves SIGKILL and SIGSTOP out);
    // this thread's mask is as it was.
    assert_eq!(
        signal_mask(&spawned.pid.to_string()),
        !(1u64 << (libc::SIGKILL - 1) | 1 << (libc::SIGSTOP - 1))
    );
    assert_eq!(signal_mask("thread-self"), our_mask);

    // The helper's copy of the probe's write end goes while it runs: EOF.
    assert!(poll(&probe_read, libc::POLLIN, 10_000), "the helper kept another descriptor");
    assert_eq!(std::fs::File::from(probe_read).read(&mut [0; 1]).unwrap(), 0);
    // Its own descriptor it keeps until released.
    assert!(!poll(&ours, libc::POLLRDHUP, 0), "the helper closed its descriptor early");
    let maps = mappings_in(&spawned.mapping);
    assert_eq!(maps.len(), 2, "the helper's mapping: {maps:?}");
    let (guard, stack) = (&maps[0], &maps[1]);
    assert!(guard.0.start == spawned.mapping.start && guard.1.starts_with("---p"), "no guard page: {maps:?}");
    assert!(stack.0.end == spawned.mapping.end && stack.1.starts_with("rw-p"), "{maps:?}");

    drop(release_end);
    assert!(poll(&ours, libc::POLLRDHUP, 10_000), "the helper did not close its descriptor");
    std::mem::forget(killer);
    wait_for_exit(spawned.pid);
    assert_eq!(mappings_in(&spawned.mapping), vec![], "the helper's mapping is still there");
}

/// Kills a waiting helper if a check fails: one that kept our descriptors would otherwise
/// hold its own release end (and our stdout, which the parent test reads to EOF) forever.
struct KillOnFailure(libc::pid_t);

impl Drop for KillOnFailure {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the pid is our unreaped child.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// A sending helper: the request arrives whole, then its end of the connection closes.
fn a_sending_helper() {
    let (ours, theirs) = socket_pair();
    let request = b"a request, as a link deletion would send it";
    let spawned = helper::spawn(theirs.as_raw_fd(), Work::Send(request)).expect("helper started");
    drop(theirs);
    wait_for_exit(spawned.pid);
    let mut buffer = [0u8; 2048];
    let mut receive = || {
        // SAFETY: recv writes at most `buffer.len()` bytes into `buffer`.
        unsafe { libc::recv(ours.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), libc::MSG_DONTWAIT) }
    };
    let n = receive();
    assert_eq!(n, request.len() as isize, "what arrived");
    assert_eq!(receive(), 0, "the helper's end is still open after its exit");
    assert_eq!(&buffer[..request.len()], request);
    assert_eq!(mappings_in(&spawned.mapping), vec![], "the helper's mapping is still there");
    // Too long a request is not handed off at all.
    assert!(helper::spawn(ours.as_raw_fd(), Work::Send(&[0; helper::MAX_REQUEST + 1])).is_none());
}

/// Memory of this process filled with a pattern before the helpers run, and checked after:
/// on the heap, on this stack's caller side, and in a mapping of its own.
struct Canaries {
    heap: Vec<u8>,
    mapping: (*mut u8, usize),
}

const PATTERN: u8 = 0xA5;

impl Canaries {
    fn new() -> Canaries {
        let len = 1 << 20;
        // SAFETY: a new anonymous mapping, unmapped in `check`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: the mapping just made, `len` bytes, writable.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), PATTERN, len) };
        Canaries { heap: vec![PATTERN; 256 << 10], mapping: (ptr.cast(), len) }
    }

    fn check(self) {
        assert!(self.heap.iter().all(|&b| b == PATTERN), "heap canary changed");
        // SAFETY: the mapping made in `new`, still mapped, `len` bytes.
        let mapped = unsafe { std::slice::from_raw_parts(self.mapping.0, self.mapping.1) };
        assert!(mapped.iter().all(|&b| b == PATTERN), "mapped canary changed");
        // SAFETY: ours, and `mapped` is not used after this.
        unsafe { libc::munmap(self.mapping.0.cast(), self.mapping.1) };
    }
}

/// Installs a seccomp filter on this thread (inherited by helpers it starts) under which
/// close_range fails with ENOSYS, as on a kernel older than 5.9.
fn refuse_close_range() {
    let close_range = libc::SYS_close_range as u32;
    let errno = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let program = [
        // A = seccomp_data.nr
        bpf(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        bpf(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, close_range),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, errno),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
    // SAFETY: prctl with integer arguments; then one that reads `fprog` and the program it
    // points to, both alive for the call (the kernel copies the program).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let mode = libc::SECCOMP_MODE_FILTER as libc::c_ulong;
        assert_eq!(libc::prctl(libc::PR_SET_SECCOMP, mode, &fprog as *const libc::sock_fprog), 0);
    }
    // SAFETY: close_range of a range that holds no descriptor.
    let result = unsafe { libc::syscall(libc::SYS_close_range, u32::MAX - 1, u32::MAX, 0) };
    let error = std::io::Error::last_os_error();
    assert!(result == -1 && error.raw_os_error() == Some(libc::ENOSYS), "close_range still works: {error}");
}

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The blocked signals of /proc/`task`.
fn signal_mask(task: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{task}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).unwrap();
    u64::from_str_radix(line.trim(), 16).unwrap()
}

/// The lines of /proc/self/maps (range, then the rest: permissions, ...) within `range`.
fn mappings_in(range: &std::ops::Range<usize>) -> Vec<(std::ops::Range<usize>, String)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut found = Vec::new();
    for line in maps.lines() {
        let (span, rest) = line.split_once(' ').unwrap();
        let (start, end) = span.split_once('-').unwrap();
        let start = usize::from_str_radix(start, 16).unwrap();
        let end = usize::from_str_radix(end, 16).unwrap();
        if start < range.end && range.start < end {
            found.push((start..end, rest.to_owned()));
        }
    }
    found
}

fn socket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [-1; 2];
    let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    // SAFETY: socketpair writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) }, 0);
    // SAFETY: both are new descriptors owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// (read end, write end)
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are new descriptors owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Whether `fd` reports one of `events` (or an error or hang-up) within `timeout_ms`: a
/// bound against hanging, not a timing check.
fn poll(fd: &OwnedFd, events: libc::c_short, timeout_ms: libc::c_int) -> bool {
    let mut entry = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    // SAFETY: poll reads and writes one pollfd.
    let n = unsafe { libc::poll(&mut entry, 1, timeout_ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1
}

/// Waits for helper `pid` and requires a clean exit.
fn wait_for_exit(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: `pid` is our child; __WCLONE because its exit signal is not SIGCHLD.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::__WCLONE) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "helper status {status:#x}");
}
