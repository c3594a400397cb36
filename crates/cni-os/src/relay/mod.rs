//! The plugin side of a node agent, run before libc starts.
//!
//! A plugin whose configuration names a node agent (`ipam.agentSocket`, etcd-ipam's
//! `etcd-ipam agent`) does almost nothing of its own on ADD and DEL: the agent holds the
//! etcd connection, the cache and the batching. Yet every such ADD pays a process start,
//! and on a virtual machine most of a start is glibc's: before `main`, it probes the CPU
//! with about 80 `cpuid` instructions, each a trap to the hypervisor (measured on the
//! project's 2-core VM: a static program that only returns from `main` costs 0.43 ms of
//! CPU, the same without libc 0.14 ms). So the binary's entry point is [`cni_rs_relay_start`]
//! instead of libc's `_start` (set by the binary's build script), and it does this first:
//!
//! 1. With no arguments, `CNI_COMMAND` ADD or DEL and stdin a configuration whose `ipam`
//!    names an `agentSocket`, it sends the agent one line,
//!    `{"op":"run","env":{<the CNI_* and trace variables>},"config":<stdin>}` (the
//!    configuration's line breaks, which JSON allows only between tokens, become spaces),
//!    and the agent runs the plugin's verb itself, with the plugin's own code, and
//!    answers [`ANSWER_PREFIX`]` <exit> <stdout bytes> <stderr bytes>\n`, then those bytes.
//!    The relay writes them to its stdout and stderr and exits with that status: the
//!    runtime sees what the full plugin would have printed.
//! 2. Anything else — other verbs, arguments (`etcd-ipam agent`), no agent configured,
//!    a configuration the scanner cannot place the keys in (see `scan`), variables that
//!    are not plain ASCII, an agent that cannot be reached or answers in another shape (an
//!    older agent) — and it puts stdin back (a memory file with what it read, as
//!    descriptor 0) and continues into libc's `_start` with the registers and stack the
//!    kernel gave: the full plugin runs as it always did, and decides. A request the agent
//!    may have served before the relay gave up is repeated by the full plugin; ADD and
//!    DEL through the agent are idempotent (an ADD repeated returns its address).
//!
//! Before libc has started there is no thread-local storage, no allocator, and no
//! resolved `IFUNC`s (in a static glibc binary `memcpy`, `memset`, `memcmp` are chosen at
//! start-up): the relay's code makes system calls directly ([`crate::raw`]), keeps its
//! buffers in one anonymous mapping, copies and compares bytes with volatile accesses
//! (which the compiler does not turn into `memcpy` or `memcmp` calls), and cannot panic
//! (optimised builds prove it at link time: [`crate::raw::NoPanic`]).

mod scan;

use core::ptr::{read_volatile, write_volatile};

use crate::raw::{self, NoPanic};

/// What an agent's answer to a relayed request starts with.
pub const ANSWER_PREFIX: &str = "CNI-RS-RELAY";

/// The `op` of a relayed request.
pub const RUN_OP: &str = "run";

/// The agent's answer to a relayed request: the plugin's exit status and output.
pub fn answer(exit: i32, stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
    let mut out = format!("{ANSWER_PREFIX} {exit} {} {}\n", stdout.len(), stderr.len()).into_bytes();
    out.extend_from_slice(stdout);
    out.extend_from_slice(stderr);
    out
}

/// The variables a relayed request carries: those the plugin SDK reads.
#[inline(always)]
fn forwarded(name: &[u8]) -> bool {
    let cni = name.get(..4).is_some_and(|p| scan::same(p, b"CNI_"));
    cni || scan::same(name, b"TRACEPARENT") || scan::same(name, b"TRACESTATE") || scan::same(name, b"BAGGAGE")
}

/// The largest configuration relayed (the agent takes requests up to 1 MiB).
const MAX_STDIN: usize = 512 << 10;
/// Room for the variables and the request's JSON around the configuration.
const MAX_ENV: usize = 64 << 10;
/// The largest answer taken from the agent (a result is a few KiB).
const MAX_ANSWER: usize = 256 << 10;
/// `struct sockaddr_un`.
const SOCKADDR_LEN: usize = 110;
const MAPPING: usize = SOCKADDR_LEN + MAX_STDIN + (MAX_STDIN + MAX_ENV) + MAX_ANSWER;
/// The agent's timeout when the configuration sets none: four of etcd-ipam's default
/// per-call timeouts, as the full plugin waits.
const DEFAULT_TIMEOUT_MS: u64 = 2000;

/// The entry point of a binary that relays (`-Wl,--entry=cni_rs_relay_start`): the relay,
/// then, unless it answered and exited, libc's `_start` with the kernel's stack and `rdx`
/// (the dynamic loader's finaliser, or 0) as they were.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn cni_rs_relay_start() -> ! {
    extern "C" {
        fn _start() -> !;
    }
    // r12 and r13 are callee-saved: `relay_or_return` keeps them for the jump.
    core::arch::naked_asm!(
        "mov r12, rsp",
        "mov r13, rdx",
        "mov rdi, rsp",
        "and rsp, -16",
        "call {relay}",
        "mov rsp, r12",
        "mov rdx, r13",
        "jmp {start}",
        relay = sym relay_or_return,
        start = sym _start,
    )
}

/// Relays and exits, or returns for the full program to start. Called by the entry point
/// only, with the process's initial stack as the kernel laid it out: `argc`, the `argv`
/// pointers and a null, the `envp` pointers and a null, each string NUL-terminated.
extern "C" fn relay_or_return(stack: *const usize) {
    let no_panic = NoPanic;
    // SAFETY: the kernel's initial stack (see above).
    let process = unsafe { Process::from_stack(stack) };
    if let Some(status) = relay(&process) {
        std::mem::forget(no_panic);
        exit(status);
    }
    std::mem::forget(no_panic);
}

/// The process's arguments and environment, read from its initial stack.
struct Process {
    argc: usize,
    envp: *const *const u8,
}

impl Process {
    /// # Safety
    /// As for [`relay_or_return`].
    #[inline(always)]
    unsafe fn from_stack(stack: *const usize) -> Process {
        // SAFETY: argc, then argc + 1 argv slots, then envp.
        unsafe {
            let argc = *stack;
            let envp = stack.add(argc.wrapping_add(2)) as *const *const u8;
            Process { argc, envp }
        }
    }

    /// Each environment entry (`NAME=value`), until `visit` returns false; whether every
    /// entry was visited.
    #[inline(always)]
    fn each_env(&self, mut visit: impl FnMut(&[u8], &[u8]) -> bool) -> bool {
        let mut slot = self.envp;
        loop {
            // SAFETY: the null-terminated envp array (see `from_stack`).
            let entry = unsafe { *slot };
            if entry.is_null() {
                return true;
            }
            // SAFETY: a NUL-terminated string of the environment.
            let bytes = unsafe { c_string(entry) };
            let mut eq = 0;
            while eq < bytes.len() && bytes.get(eq) != Some(&b'=') {
                eq = eq.wrapping_add(1);
            }
            let (name, value) =
                (bytes.get(..eq).unwrap_or_default(), bytes.get(eq.wrapping_add(1)..).unwrap_or_default());
            if !visit(name, value) {
                return false;
            }
            // SAFETY: still within the array: this entry was not its null.
            slot = unsafe { slot.add(1) };
        }
    }

    #[inline(always)]
    fn var(&self, wanted: &[u8]) -> Option<&'static [u8]> {
        let mut found = None;
        self.each_env(|name, value| {
            if scan::same(name, wanted) {
                // SAFETY: the environment's strings live as long as the process.
                found = Some(unsafe { core::slice::from_raw_parts(value.as_ptr(), value.len()) });
                return false;
            }
            true
        });
        found
    }
}

/// # Safety
/// `s` points to a NUL-terminated string that lives as long as the process.
#[inline(always)]
unsafe fn c_string(s: *const u8) -> &'static [u8] {
    let mut len = 0usize;
    // SAFETY: every byte up to and including the NUL is the string's.
    unsafe {
        while read_volatile(s.add(len)) != 0 {
            len = len.wrapping_add(1);
        }
        core::slice::from_raw_parts(s, len)
    }
}

/// The relay: the plugin's exit status when the agent answered, `None` to start the full
/// plugin (stdin, if read, put back first).
#[inline(always)]
fn relay(process: &Process) -> Option<i32> {
    if process.argc != 1 {
        return None;
    }
    let command = process.var(b"CNI_COMMAND")?;
    if !scan::same(command, b"ADD") && !scan::same(command, b"DEL") {
        return None;
    }
    let mapping = Mapping::new()?;
    // Each buffer starts where the one before ended (the address first, then stdin, the
    // request, the answer): a relay touches three pages of the mapping, not one per buffer.
    let (sockaddr, rest) = mapping.bytes.split_at_mut_checked(SOCKADDR_LEN)?;
    // The file that gives stdin back if the relay cannot carry the request, made before
    // stdin is read: without one (a seccomp filter, an old kernel) nothing is read and
    // the full plugin gets stdin untouched.
    let memfd = memfd_create()?;
    if memfd == 0 {
        // Descriptor 0 was closed: there is no stdin to carry, and the full plugin must
        // find it closed as it was.
        close(0);
        return None;
    }
    let stdin = read_stdin(rest.get_mut(..MAX_STDIN)?);
    let outcome = match stdin {
        Stdin::Whole(len) => match rest.split_at_mut_checked(len) {
            Some((config, work)) => exchange(process, config, work, sockaddr),
            None => None,
        },
        Stdin::TooLong | Stdin::Failed => None,
    };
    if outcome.is_none() {
        put_stdin_back(memfd, rest.get_mut(..MAX_STDIN)?, stdin);
    }
    outcome
}

/// One anonymous mapping for every buffer; the kernel hands its pages out zeroed as they
/// are first touched.
struct Mapping {
    bytes: &'static mut [u8],
}

impl Mapping {
    #[inline(always)]
    fn new() -> Option<Mapping> {
        let (prot, flags) = (
            (libc::PROT_READ | libc::PROT_WRITE) as usize,
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as usize,
        );
        // SAFETY: a new private mapping; the kernel picks the address.
        let addr = unsafe { raw::call(libc::SYS_mmap, [0, MAPPING, prot, flags, usize::MAX, 0]) };
        if addr < 0 {
            return None;
        }
        // SAFETY: MAPPING bytes, readable and writable, used by nobody else, never unmapped
        // while the relay runs (the full plugin inherits it unused if the relay gives up).
        Some(Mapping { bytes: unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, MAPPING) } })
    }
}

enum Stdin {
    /// All of stdin, this many bytes.
    Whole(usize),
    /// More than the relay takes: the area is full and the rest is still unread.
    TooLong,
    /// A read failed: what was read is in the area, up to this many bytes.
    Failed,
}

#[inline(always)]
fn read_stdin(area: &mut [u8]) -> Stdin {
    let mut len = 0usize;
    loop {
        let Some(room) = area.get_mut(len..) else { return Stdin::Failed };
        if room.is_empty() {
            return Stdin::TooLong;
        }
        match read(0, room) {
            0 => return Stdin::Whole(len),
            n if n > 0 => len = len.wrapping_add(n as usize),
            _ => return Stdin::Failed,
        }
    }
}

/// A memory file, close-on-exec (the relay's own until it is made descriptor 0).
#[inline(always)]
fn memfd_create() -> Option<i32> {
    const NAME: &[u8] = b"stdin\0";
    // SAFETY: memfd_create reads the NUL-terminated name.
    let fd = unsafe {
        raw::call(libc::SYS_memfd_create, [NAME.as_ptr() as usize, libc::MFD_CLOEXEC as usize, 0, 0, 0, 0])
    };
    (fd >= 0).then_some(fd as i32)
}

/// Makes descriptor 0 `memfd`, holding what stdin held: the bytes read, then what was
/// left unread.
#[inline(always)]
fn put_stdin_back(memfd: i32, area: &mut [u8], stdin: Stdin) {
    let read_len = match stdin {
        Stdin::Whole(len) => len,
        Stdin::TooLong => area.len(),
        // A failed read consumed nothing the plugin could have read either.
        Stdin::Failed => return,
    };
    let mut whole = write_all(memfd, area.get(..read_len).unwrap_or_default());
    if matches!(stdin, Stdin::TooLong) {
        // The rest of stdin, through the area (its contents are written already).
        loop {
            match read(0, area) {
                0 => break,
                n if n > 0 => whole &= write_all(memfd, area.get(..n as usize).unwrap_or_default()),
                _ => break,
            }
        }
    }
    // SAFETY: lseek and dup2 on descriptors of this process only.
    unsafe {
        raw::call(libc::SYS_lseek, [memfd as usize, 0, libc::SEEK_SET as usize, 0, 0, 0]);
        if whole {
            raw::call(libc::SYS_dup2, [memfd as usize, 0, 0, 0, 0, 0]);
        }
    }
    close(memfd);
}

#[inline(always)]
fn close(fd: i32) {
    // SAFETY: closes a descriptor of this process the relay is done with.
    unsafe { raw::call(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
}

/// Sends the request, takes the answer, writes the plugin's output: its exit status, or
/// `None` (nothing written) when the agent was not reached or answered in another shape.
#[inline(always)]
fn exchange(process: &Process, config: &[u8], work: &mut [u8], sockaddr: &mut [u8]) -> Option<i32> {
    let keys = scan::agent_keys(config)?;
    let (start, end) = keys.socket?;
    let socket_path = config.get(start..end)?;
    let request_len = build_request(process, config, work.get_mut(..MAX_STDIN + MAX_ENV)?)?.len();
    let (request, answer_area) = work.split_at_mut_checked(request_len)?;
    let answer_area = answer_area.get_mut(..MAX_ANSWER)?;
    let timeout_ms = keys.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).max(1).saturating_mul(4);
    let fd = connect(socket_path, sockaddr, timeout_ms)?;
    let answered = write_all(fd, request).then(|| read_to_end(fd, answer_area)).flatten();
    close(fd);
    let (status, stdout, stderr) = parse_answer(answer_area.get(..answered?)?)?;
    // The runtime reads stdout; a failure to write it is the plugin's failure too.
    if !write_all(1, stdout) {
        return Some(1);
    }
    write_all(2, stderr);
    Some(status)
}

/// The request line in `area`.
#[inline(always)]
fn build_request<'a>(process: &Process, config: &[u8], area: &'a mut [u8]) -> Option<&'a [u8]> {
    let mut out = Writer { area, len: 0 };
    let mut ok = out.push(b"{\"op\":\"run\",\"env\":{");
    let mut first = true;
    let plain = process.each_env(|name, value| {
        if !forwarded(name) {
            return true;
        }
        // Names and values go into JSON strings as they are: only what needs no escape.
        let name_ok = all(name, |b| b.is_ascii_alphanumeric() || b == b'_');
        let value_ok = all(value, |b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if !name_ok || !value_ok {
            return false;
        }
        ok &= (first || out.push(b",")) && out.push(b"\"") && out.push(name) && out.push(b"\":\"");
        ok &= out.push(value) && out.push(b"\"");
        first = false;
        true
    });
    if !plain {
        return None;
    }
    ok &= out.push(b"},\"config\":");
    let at = out.len;
    ok &= out.push(config);
    // Line breaks between tokens become spaces (inside strings there are none: `scan`).
    let mut i = at;
    while i < out.len {
        if let Some(byte) = out.area.get_mut(i) {
            // SAFETY: a byte of the area, which `byte` borrows.
            let current = unsafe { read_volatile(byte) };
            if current == b'\n' || current == b'\r' {
                // SAFETY: as above.
                unsafe { write_volatile(byte, b' ') };
            }
        }
        i = i.wrapping_add(1);
    }
    ok &= out.push(b"}\n");
    if !ok {
        return None;
    }
    out.area.get(..out.len)
}

#[inline(always)]
fn all(bytes: &[u8], test: impl Fn(u8) -> bool) -> bool {
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if !test(b) {
            return false;
        }
        i = i.wrapping_add(1);
    }
    true
}

/// Appends to an area, byte by byte with volatile writes (no `memcpy`: see the module).
struct Writer<'a> {
    area: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    /// Whether `bytes` fitted (if not, nothing was written).
    #[inline(always)]
    fn push(&mut self, bytes: &[u8]) -> bool {
        let Some(room) = self.area.get_mut(self.len..) else { return false };
        if room.len() < bytes.len() {
            return false;
        }
        let mut i = 0;
        while let (Some(&b), Some(slot)) = (bytes.get(i), room.get_mut(i)) {
            // SAFETY: a byte of the area, which `slot` borrows.
            unsafe { write_volatile(slot, b) };
            i = i.wrapping_add(1);
        }
        self.len = self.len.wrapping_add(bytes.len());
        true
    }
}

/// A connected unix stream socket with send and receive timeouts, or `None`.
#[inline(always)]
fn connect(path: &[u8], sockaddr: &mut [u8], timeout_ms: u64) -> Option<i32> {
    // sun_family, then the path and its NUL within sun_path's 108 bytes; the area is
    // zeroed, so the NUL is there already.
    if path.is_empty() || path.len() >= SOCKADDR_LEN - 2 || !all(path, |b| b != 0) {
        return None;
    }
    let family = (libc::AF_UNIX as u16).to_ne_bytes();
    let mut at = Writer { area: sockaddr, len: 0 };
    if !(at.push(&family) && at.push(path)) {
        return None;
    }
    let kind = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as usize;
    // SAFETY: socket() takes no memory.
    let fd = unsafe { raw::call(libc::SYS_socket, [libc::AF_UNIX as usize, kind, 0, 0, 0, 0]) };
    if fd < 0 {
        return None;
    }
    let fd = fd as i32;
    let timeout = [(timeout_ms / 1000) as i64, ((timeout_ms % 1000) * 1000) as i64];
    let (level, size) = (libc::SOL_SOCKET as usize, core::mem::size_of_val(&timeout));
    let len = 2usize.wrapping_add(path.len()).wrapping_add(1);
    // SAFETY: setsockopt reads the 16-byte timeval; connect reads `len` bytes of the area.
    let connected = unsafe {
        let tv = timeout.as_ptr() as usize;
        raw::call(libc::SYS_setsockopt, [fd as usize, level, libc::SO_RCVTIMEO as usize, tv, size, 0]) == 0
            && raw::call(libc::SYS_setsockopt, [fd as usize, level, libc::SO_SNDTIMEO as usize, tv, size, 0])
                == 0
            && raw::call(libc::SYS_connect, [fd as usize, at.area.as_ptr() as usize, len, 0, 0, 0]) == 0
    };
    if !connected {
        close(fd);
        return None;
    }
    Some(fd)
}

/// `(status, stdout, stderr)` from `CNI-RS-RELAY <status> <stdout len> <stderr len>\n...`,
/// the lengths exactly those of what follows.
#[inline(always)]
fn parse_answer(answer: &[u8]) -> Option<(i32, &[u8], &[u8])> {
    let rest = answer.get(ANSWER_PREFIX.len()..)?;
    if !scan::same(answer.get(..ANSWER_PREFIX.len())?, ANSWER_PREFIX.as_bytes()) {
        return None;
    }
    let (status, rest) = number_after_space(rest)?;
    let (out_len, rest) = number_after_space(rest)?;
    let (err_len, rest) = number_after_space(rest)?;
    let rest = after_byte(rest, b'\n')?;
    if status > 255 || out_len.checked_add(err_len)? != rest.len() as u64 {
        return None;
    }
    let (stdout, stderr) = rest.split_at_checked(out_len as usize)?;
    Some((status as i32, stdout, stderr))
}

/// `" <digits>"` at the start of `bytes`: the number (at most 9 digits) and what follows.
#[inline(always)]
fn number_after_space(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let bytes = after_byte(bytes, b' ')?;
    let mut value: u64 = 0;
    let mut i = 0;
    while let Some(&digit @ b'0'..=b'9') = bytes.get(i) {
        if i == 9 {
            return None;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit.wrapping_sub(b'0')));
        i = i.wrapping_add(1);
    }
    if i == 0 {
        return None;
    }
    Some((value, bytes.get(i..)?))
}

/// What follows `byte` at the start of `bytes` (`strip_prefix` compares with `memcmp`).
#[inline(always)]
fn after_byte(bytes: &[u8], byte: u8) -> Option<&[u8]> {
    match bytes.split_first() {
        Some((&first, rest)) if first == byte => Some(rest),
        _ => None,
    }
}

#[inline(always)]
fn read(fd: i32, into: &mut [u8]) -> isize {
    loop {
        // SAFETY: read writes at most `into.len()` bytes into `into`.
        let n = unsafe {
            raw::call(libc::SYS_read, [fd as usize, into.as_mut_ptr() as usize, into.len(), 0, 0, 0])
        };
        if n != -(libc::EINTR as isize) {
            return n;
        }
    }
}

/// Reads until end of file: how many bytes, or `None` (an error, a timeout, no room).
#[inline(always)]
fn read_to_end(fd: i32, area: &mut [u8]) -> Option<usize> {
    let mut len = 0usize;
    loop {
        let room = area.get_mut(len..)?;
        if room.is_empty() {
            return None;
        }
        match read(fd, room) {
            0 => return Some(len),
            n if n > 0 => len = len.wrapping_add(n as usize),
            _ => return None,
        }
    }
}

/// Whether all of `bytes` was written.
#[inline(always)]
fn write_all(fd: i32, bytes: &[u8]) -> bool {
    let mut done = 0usize;
    while let Some(rest) = bytes.get(done..) {
        if rest.is_empty() {
            return true;
        }
        // SAFETY: write reads `rest.len()` bytes of `rest`.
        let n =
            unsafe { raw::call(libc::SYS_write, [fd as usize, rest.as_ptr() as usize, rest.len(), 0, 0, 0]) };
        if n == -(libc::EINTR as isize) {
            continue;
        }
        if n <= 0 {
            return false;
        }
        done = done.wrapping_add(n as usize);
    }
    false
}

#[inline(always)]
fn exit(status: i32) -> ! {
    // SAFETY: exit_group ends the process; it touches no memory.
    unsafe { raw::call(libc::SYS_exit_group, [status as usize, 0, 0, 0, 0, 0]) };
    // exit_group does not return; should it, a fault is the only honest way out.
    loop {
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_exactly_and_anything_else_is_refused() {
        let good = answer(1, b"{\"code\":11}\n", b"err\n");
        assert_eq!(parse_answer(&good), Some((1, &b"{\"code\":11}\n"[..], &b"err\n"[..])));
        assert_eq!(parse_answer(&answer(0, b"", b"")), Some((0, &b""[..], &b""[..])));
        for bad in [
            &b"CNI-RS-RELAY 0 5 0\nabc"[..],
            b"CNI-RS-RELAY 0 1 0\nabc",
            b"CNI-RS-RELAY 0 1\na",
            b"CNI-RS-RELAY 256 0 0\n",
            b"CNI-RS-RELAY 0 9999999999 0\n",
            b"CNI-RS-RELAY  0 0 0\n",
            b"CNI-RS-RELAY 0 0 0",
            b"{\"code\":6,\"msg\":\"unknown op\"}\n",
            b"",
        ] {
            assert_eq!(parse_answer(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_writer_refuses_what_does_not_fit_and_writes_nothing_of_it() {
        let mut area = [0u8; 8];
        let mut w = Writer { area: &mut area, len: 0 };
        assert!(w.push(b"abcde"));
        assert!(!w.push(b"fghij"));
        assert!(w.push(b"fgh"));
        assert_eq!(&area, b"abcdefgh");
    }

    #[test]
    fn the_forwarded_variables_are_what_the_sdk_reads() {
        for name in ["CNI_COMMAND", "CNI_ARGS", "CNI_NETNS_OVERRIDE", "TRACEPARENT", "TRACESTATE", "BAGGAGE"]
        {
            assert!(forwarded(name.as_bytes()), "{name}");
        }
        for name in ["PATH", "HOME", "CNI", "TRACEPARENTS", "LD_PRELOAD"] {
            assert!(!forwarded(name.as_bytes()), "{name}");
        }
    }
}
