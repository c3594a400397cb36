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
mod sys;
mod wire;

use core::ptr::read_volatile;

use crate::raw::NoPanic;

use sys::{close, connect, exit, memfd_create, read, read_to_end, rewind_as_stdin, write_all, Mapping};
pub use wire::{answer, ANSWER_PREFIX, RUN_OP};
use wire::{build_request, parse_answer};

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
    if whole {
        rewind_as_stdin(memfd);
    }
    close(memfd);
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
