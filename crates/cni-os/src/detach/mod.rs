//! Handing the tail of an operation to a detached helper process — for programs that
//! opt in with [`enable_helper_processes`].
//!
//! Some kernel operations are complete, as far as anyone can observe, well before the
//! system call that made them returns: the call then only waits for RCU callbacks to run
//! (`rcu_barrier()` when a network device is unregistered, ~20 ms with HZ=250; the flush of
//! nf_tables' deferred destruction when an nfnetlink socket is released, 6–18 ms). A
//! plugin's caller waits for the plugin to exit, so a short-lived plugin hands such a wait
//! to a helper process that keeps one descriptor and no other (no stdout pipe the runtime
//! reads to EOF, no lock) and outlives the plugin if need be (it is then re-parented to
//! init, or the runtime's subreaper, which reaps it).
//!
//! That is a choice for the program, not for a library: by default no helper is started
//! and the operations that could hand a tail off (in cni-net:
//! `Netlink::delete_link_in_background`, `NftClient::close_without_waiting`, the packet
//! sockets of neighbour announcements) do the work themselves. The `cni-plugins` binary
//! opts in first thing in `main`. Even then,
//! [`NO_HELPERS_VAR`] in the environment keeps them off (for valgrind, which ends a program
//! that makes a memory-sharing clone other than a thread or a vfork; `tools/link-order.py`
//! profiles plugins so).
//!
//! The helper is started with one `clone(CLONE_VM)` and nothing waited for: it shares
//! this process's memory instead of copying its page tables as `fork()` does, and this
//! process goes on at once. (Forking twice, as daemons do, cost ~0.4 ms of every nftables
//! plugin's ADD; a vfork-like intermediate child that started the helper and exited still
//! cost ~0.2 ms, most of it this process waiting to be woken on a 2-CPU VM.) Its exit
//! sends no signal; a helper that ends before this process does is reaped by the next
//! [`detach`] or, at the latest, when this process exits.
//!
//! Sharing memory has rules, which `helper.rs` states and enforces: the helper runs in a
//! mapping of its own (its job, its stack, a guard page below), with every signal
//! blocked, makes system calls directly (not through libc), cannot allocate or panic, and
//! unmaps that mapping and exits in one instruction sequence that no longer needs a stack.
//! If anything fails, nothing was handed off and the caller does the work itself.

mod helper;
#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests;

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set (to anything) in a program's environment, it starts no helper processes even if it
/// called [`enable_helper_processes`]: the work is done synchronously.
pub const NO_HELPERS_VAR: &str = "CNI_RS_NO_HELPER_PROCESSES";

/// Whether this process hands tails to helpers. Only ever set, never cleared.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Lets this process hand the kernel's slow clean-up to helper processes (see the module
/// docs), unless [`NO_HELPERS_VAR`] is set in its environment now, or this architecture
/// is not supported (x86_64 and aarch64 are). Meant for short-lived programs such as CNI
/// plugins, whose caller waits for them to exit; call it once, early in `main`. Returns
/// whether helpers are on.
pub fn enable_helper_processes() -> bool {
    let supported = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
    if supported && std::env::var_os(NO_HELPERS_VAR).is_none() {
        ENABLED.store(true, Ordering::Relaxed);
    }
    helper_processes_enabled()
}

/// Whether [`enable_helper_processes`] turned helpers on in this process.
pub fn helper_processes_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What the helper does with the descriptor it keeps.
pub enum Tail<'a> {
    /// Sends `request` (one datagram, at most 1 KiB) and closes the descriptor. For
    /// netlink requests the kernel does the work inside `send` itself, so this waits for it
    /// without reading an answer: any answer stays queued on the socket, which the caller
    /// may still use. Whoever needs to know the outcome looks at the kernel's state
    /// afterwards.
    Send(&'a [u8]),
    /// Waits until the caller drops the returned [`Handoff`] (after dropping its own
    /// reference to the descriptor), then, `on_tick`, until the next close tick (see
    /// `helper::CLOSE_TICK_NS`), then closes the descriptor: the helper's is then the last
    /// reference. Without `on_tick` it closes at once: a release with nothing to flush
    /// holds the commit mutex only briefly, and helpers sleeping until a tick were
    /// measured to slow an ADD-only workload (podman chain ADD, last 20 of 200 vs first 20:
    /// 1.21x with ticks, 1.07x without).
    CloseAfterCaller { on_tick: bool },
}

/// A helper took over. Dropping this releases a [`Tail::CloseAfterCaller`] helper.
pub struct Handoff {
    _release: Option<OwnedFd>,
}

/// Runs `tail` on `fd` in a detached helper. `None` if helpers are off or none could be
/// started: then nothing was done and the caller does the work itself. The helper works on
/// its own copy of `fd` (its descriptor table is a copy of this process's): the caller's
/// stays open until the caller closes it.
pub fn detach(fd: BorrowedFd<'_>, tail: Tail<'_>) -> Option<Handoff> {
    let fd = fd.as_raw_fd();
    if !helper_processes_enabled() {
        return None;
    }
    let pipe = match tail {
        Tail::Send(_) => None,
        Tail::CloseAfterCaller { .. } => Some(Pipe::new()?),
    };
    let work = match tail {
        Tail::Send(request) => helper::Work::Send(request),
        Tail::CloseAfterCaller { on_tick } => {
            helper::Work::CloseAfterEof { wait_end: pipe.as_ref().map_or(-1, |p| p.wait_end), on_tick }
        }
    };
    reap_finished_helpers();
    let spawned = helper::spawn(fd, work)?; // on None, `pipe` is closed on drop
    running_helpers().push(spawned.pid);
    Some(Handoff { _release: pipe.map(Pipe::into_release_end) })
}

/// Helpers started by this process that may not have been reaped yet.
fn running_helpers() -> std::sync::MutexGuard<'static, Vec<libc::pid_t>> {
    static HELPERS: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());
    HELPERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reaps the helpers that have exited, so that a long-lived process (a test, a runtime
/// using this crate) collects no zombies. A plugin process exits before it matters.
fn reap_finished_helpers() {
    running_helpers().retain(|&pid| {
        // SAFETY: `pid` is a child of ours that nothing else waits for; __WCLONE because
        // its exit signal is not SIGCHLD.
        let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG | libc::__WCLONE) };
        reaped == 0 // still running; otherwise reaped now, or not ours to reap any more
    });
}

/// The pipe whose EOF releases a [`Tail::CloseAfterCaller`] helper.
struct Pipe {
    wait_end: RawFd,
    release_end: RawFd,
}

impl Pipe {
    fn new() -> Option<Pipe> {
        let mut ends = [-1i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        (unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } == 0)
            .then_some(Pipe { wait_end: ends[0], release_end: ends[1] })
    }

    /// The helper has its copy of the wait end; ours goes, the release end is kept.
    fn into_release_end(self) -> OwnedFd {
        let release_end = self.release_end;
        // SAFETY: both descriptors are this Pipe's; forget stops Drop closing them again.
        unsafe {
            libc::close(self.wait_end);
            std::mem::forget(self);
            OwnedFd::from_raw_fd(release_end)
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: both descriptors are this Pipe's.
        unsafe {
            libc::close(self.wait_end);
            libc::close(self.release_end);
        }
    }
}
