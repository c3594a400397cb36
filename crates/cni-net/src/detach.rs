//! Handing the tail of an operation to a detached grandchild process.
//!
//! Some kernel operations are complete, as far as anyone can observe, well before the
//! system call that made them returns: the call then only waits for RCU callbacks to run
//! (`rcu_barrier()` when a network device is unregistered, ~20 ms with HZ=250; the flush of
//! nf_tables' deferred destruction when an nfnetlink socket is released, 6–18 ms). A
//! plugin's caller waits for the plugin to exit, so a short-lived plugin hands such a wait
//! to a grandchild: it forks twice, the intermediate child exits at once (reaped here, so
//! the grandchild is re-parented to init and never becomes our zombie), and the grandchild
//! keeps one descriptor and no other (no stdout pipe the runtime reads to EOF, no lock).
//!
//! Between fork and `_exit` the children make only async-signal-safe system calls on
//! memory prepared before the fork, so forking a process that may have other threads is
//! sound. If forking fails, the work is done here, synchronously.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// What the grandchild does with the descriptor it keeps.
pub(crate) enum Tail<'a> {
    /// Sends `request` (one datagram) and closes the descriptor. For netlink requests the
    /// kernel does the work inside `send` itself, so this waits for it without reading
    /// an answer: any answer stays queued on the socket, which the caller may still use.
    /// Whoever needs to know the outcome looks at the kernel's state afterwards.
    Send(&'a [u8]),
    /// Waits until the caller drops the returned [`Handoff`] (after dropping its own
    /// reference to the descriptor), then, `on_tick`, until the next close tick (see
    /// [`CLOSE_TICK_NS`]), then closes the descriptor: the grandchild's is then the last
    /// reference. Without `on_tick` it closes at once: a release with nothing to flush
    /// holds the commit mutex only briefly, and grandchildren sleeping until a tick were
    /// measured to slow an ADD-only workload (podman chain ADD, last 20 of 200 vs first 20:
    /// 1.21x with ticks, 1.07x without).
    CloseAfterCaller { on_tick: bool },
}

/// A grandchild took over. Dropping this releases a [`Tail::CloseAfterCaller`] grandchild.
pub(crate) struct Handoff {
    _release: Option<OwnedFd>,
}

/// Runs `tail` on `fd` in a detached grandchild. `None` if it could not be detached: then
/// nothing was done and the caller does the work itself.
pub(crate) fn detach(fd: RawFd, tail: Tail<'_>) -> Option<Handoff> {
    let mut pipe = [-1i32; 2];
    let needs_pipe = matches!(tail, Tail::CloseAfterCaller { .. });
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if needs_pipe && unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let [wait_end, release_end] = pipe;
    // SAFETY: see the module documentation; the children touch only `request` and
    // descriptors, all set up before the fork.
    let forked = unsafe {
        match libc::fork() {
            0 => {
                if libc::fork() == 0 {
                    keep_only(fd, wait_end);
                    match tail {
                        Tail::Send(request) => {
                            libc::send(fd, request.as_ptr().cast(), request.len(), 0);
                        }
                        Tail::CloseAfterCaller { on_tick } => {
                            let mut byte = 0u8;
                            while libc::read(wait_end, (&mut byte as *mut u8).cast(), 1) > 0 {}
                            if on_tick {
                                sleep_until_close_tick();
                            }
                        }
                    }
                    libc::close(fd);
                    libc::_exit(0);
                }
                libc::_exit(0);
            }
            -1 => false,
            intermediate => {
                let mut status = 0;
                libc::waitpid(intermediate, &mut status, 0);
                true
            }
        }
    };
    // SAFETY: the pipe's descriptors were created above and are owned by nobody else.
    let release = needs_pipe.then(|| unsafe {
        libc::close(wait_end);
        OwnedFd::from_raw_fd(release_end)
    });
    forked.then_some(Handoff { _release: release })
}

/// Close ticks: every [`Tail::CloseAfterCaller`] grandchild on the machine whose client
/// deleted something closes its descriptor at the next multiple of this on the
/// system-wide monotonic clock.
///
/// Why: releasing an nfnetlink socket flushes the namespace's pending nf_tables
/// destruction *while holding its commit mutex*, and that destruction waits for an RCU
/// grace period when the commit deleted anything. A release right after each DEL's commit
/// (as plugins in a chain do, one after the other) thus blocked the next plugin's commit
/// for a grace period: 8–10 ms of each of firewall, portmap and bridge DEL in the podman
/// chain. Released together, the first release of a tick waits for the flush and the
/// others find nothing pending, so commits are blocked once per tick at most, not once
/// per plugin. A grandchild lives at most this long plus [`CLOSE_MIN_WAIT_NS`].
const CLOSE_TICK_NS: i64 = 100_000_000;
/// The least a grandchild waits before its tick: about one grace period, so that its own
/// commit's destruction has usually run by then.
const CLOSE_MIN_WAIT_NS: i64 = 10_000_000;

/// Sleeps until the next close tick at least [`CLOSE_MIN_WAIT_NS`] away.
///
/// # Safety
/// Async-signal-safe (clock_gettime, clock_nanosleep), for a forked child.
unsafe fn sleep_until_close_tick() {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    let now_ns = now.tv_sec * 1_000_000_000 + now.tv_nsec;
    let target = (now_ns + CLOSE_MIN_WAIT_NS) / CLOSE_TICK_NS * CLOSE_TICK_NS + CLOSE_TICK_NS;
    let until = libc::timespec { tv_sec: target / 1_000_000_000, tv_nsec: target % 1_000_000_000 };
    while libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &until, std::ptr::null_mut())
        == libc::EINTR
    {}
}

/// Closes every descriptor except `a` and `b` (`-1` for none).
///
/// # Safety
/// Only for a freshly forked child that owns nothing else.
unsafe fn keep_only(a: RawFd, b: RawFd) {
    let mut keep = [a, b];
    keep.sort_unstable();
    let mut next = 0u32;
    for fd in keep.into_iter().filter(|fd| *fd >= 0) {
        let fd = fd as u32;
        if fd > next {
            libc::syscall(libc::SYS_close_range, next, fd - 1, 0u32);
        }
        next = fd + 1;
    }
    libc::syscall(libc::SYS_close_range, next, u32::MAX, 0u32);
}
