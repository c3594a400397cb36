//! Handing the tail of an operation to a detached helper process.
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
//! The helper is started with one `clone(CLONE_VM)` and nothing waited for: it shares
//! this process's memory instead of copying its page tables as `fork()` does, and this
//! process goes on at once. (Forking twice, as daemons do, cost ~0.4 ms of every nftables
//! plugin's ADD; a vfork-like intermediate child that started the helper and exited still
//! cost ~0.2 ms, most of it this process waiting to be woken on a 2-CPU VM.) Its exit
//! sends no signal; a helper that ends before this process does is reaped by the next
//! [`detach`] or, at the latest, when this process exits.
//!
//! Sharing memory has rules. The helper runs while this process goes on, so it touches
//! nothing of ours: it works from a [`Job`] copied, before the clone, into a mapping of
//! its own that also holds its stack; it makes system calls directly, not through libc
//! (whose `errno` is our thread's); and it unmaps that mapping and exits in one
//! instruction sequence that no longer needs a stack. If anything fails, nothing was
//! handed off and the caller does the work itself; so too when [`NO_HELPERS_VAR`] is set
//! (for valgrind, which ends a program that makes a memory-sharing clone other than a
//! thread or a vfork; `tools/link-order.py` profiles plugins so).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// What the helper does with the descriptor it keeps.
pub(crate) enum Tail<'a> {
    /// Sends `request` (one datagram, at most [`MAX_REQUEST`] bytes) and closes the
    /// descriptor. For netlink requests the kernel does the work inside `send` itself, so
    /// this waits for it without reading an answer: any answer stays queued on the socket,
    /// which the caller may still use. Whoever needs to know the outcome looks at the
    /// kernel's state afterwards.
    Send(&'a [u8]),
    /// Waits until the caller drops the returned [`Handoff`] (after dropping its own
    /// reference to the descriptor), then, `on_tick`, until the next close tick (see
    /// [`CLOSE_TICK_NS`]), then closes the descriptor: the helper's is then the last
    /// reference. Without `on_tick` it closes at once: a release with nothing to flush
    /// holds the commit mutex only briefly, and helpers sleeping until a tick were
    /// measured to slow an ADD-only workload (podman chain ADD, last 20 of 200 vs first 20:
    /// 1.21x with ticks, 1.07x without).
    CloseAfterCaller { on_tick: bool },
}

/// A helper took over. Dropping this releases a [`Tail::CloseAfterCaller`] helper.
pub(crate) struct Handoff {
    _release: Option<OwnedFd>,
}

/// The largest request [`Tail::Send`] takes (a link deletion is ~40 bytes).
const MAX_REQUEST: usize = 1024;
/// The helper's mapping: its [`Job`] at the bottom, its stack above.
const AREA: usize = 64 * 1024;

/// Everything the children need, in their own mapping.
#[repr(C)]
struct Job {
    fd: RawFd,
    /// The pipe end a [`Tail::CloseAfterCaller`] helper reads to EOF; -1 for Send.
    wait_end: RawFd,
    on_tick: bool,
    request_len: usize,
    request: [u8; MAX_REQUEST],
}

/// Set (to anything) in a plugin's environment, it starts no helper processes and waits
/// for the kernel's clean-up itself.
pub const NO_HELPERS_VAR: &str = "CNI_RS_NO_HELPER_PROCESSES";

/// Runs `tail` on `fd` in a detached helper. `None` if it could not be detached: then
/// nothing was done and the caller does the work itself.
pub(crate) fn detach(fd: RawFd, tail: Tail<'_>) -> Option<Handoff> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
        || std::env::var_os(NO_HELPERS_VAR).is_some()
    {
        return None;
    }
    let (request, pipe, on_tick) = match tail {
        Tail::Send(request) if request.len() > MAX_REQUEST => return None,
        Tail::Send(request) => (request, None, false),
        Tail::CloseAfterCaller { on_tick } => (&[][..], Some(Pipe::new()?), on_tick),
    };
    let area = Area::new()?;
    // SAFETY: the area is fresh, writable, page-aligned and larger than a Job; nobody else
    // sees it until the clone below.
    unsafe {
        let job = area.job();
        job.write(Job {
            fd,
            wait_end: pipe.as_ref().map_or(-1, |p| p.wait_end),
            on_tick,
            request_len: request.len(),
            request: [0; MAX_REQUEST],
        });
        (&mut (*job).request)[..request.len()].copy_from_slice(request);
    }
    reap_finished_helpers();
    // SAFETY: see the module documentation; the helper runs on the top of the area and
    // reads only the Job. Exit signal 0: its end concerns nobody.
    let pid = unsafe { libc::clone(helper, area.top(), libc::CLONE_VM, area.job().cast()) };
    if pid <= 0 {
        return None; // `area` and `pipe` are released on drop.
    }
    running_helpers().push(pid);
    area.give_to_helper();
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

/// The helper. Only direct system calls on its own memory (see the module docs).
extern "C" fn helper(job: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the Job was written before the first clone and is never changed.
    let job = unsafe { &*(job as *const Job) };
    unsafe {
        keep_only(job.fd, job.wait_end);
        if job.wait_end < 0 {
            let request = job.request.as_ptr() as usize;
            sys::call(libc::SYS_sendto, [job.fd as usize, request, job.request_len, 0, 0, 0]);
        } else {
            let mut byte = 0u8;
            let buffer = &mut byte as *mut u8 as usize;
            loop {
                let n = sys::call(libc::SYS_read, [job.wait_end as usize, buffer, 1, 0, 0, 0]);
                if n == 0 || (n < 0 && n != -(libc::EINTR as isize)) {
                    break;
                }
            }
            if job.on_tick {
                sleep_until_close_tick();
            }
        }
        sys::call(libc::SYS_close, [job.fd as usize, 0, 0, 0, 0, 0]);
        sys::unmap_and_exit(job as *const Job as usize, AREA)
    }
}

/// Close ticks: every [`Tail::CloseAfterCaller`] helper on the machine whose client
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
/// per plugin. A helper lives at most this long plus [`CLOSE_MIN_WAIT_NS`].
const CLOSE_TICK_NS: i64 = 100_000_000;
/// The least a helper waits before its tick: about one grace period, so that its own
/// commit's destruction has usually run by then.
const CLOSE_MIN_WAIT_NS: i64 = 10_000_000;

/// Sleeps until the next close tick at least [`CLOSE_MIN_WAIT_NS`] away.
///
/// # Safety
/// Direct system calls only, for the helper.
unsafe fn sleep_until_close_tick() {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let clock = libc::CLOCK_MONOTONIC as usize;
    sys::call(libc::SYS_clock_gettime, [clock, &mut now as *mut _ as usize, 0, 0, 0, 0]);
    let now_ns = now.tv_sec * 1_000_000_000 + now.tv_nsec;
    let target = (now_ns + CLOSE_MIN_WAIT_NS) / CLOSE_TICK_NS * CLOSE_TICK_NS + CLOSE_TICK_NS;
    let until = libc::timespec { tv_sec: target / 1_000_000_000, tv_nsec: target % 1_000_000_000 };
    let args = [clock, libc::TIMER_ABSTIME as usize, &until as *const _ as usize, 0, 0, 0];
    while sys::call(libc::SYS_clock_nanosleep, args) == -(libc::EINTR as isize) {}
}

/// Closes every descriptor except `a` and `b` (`-1` for none).
///
/// # Safety
/// Only for the helper, which owns nothing else.
unsafe fn keep_only(a: RawFd, b: RawFd) {
    let mut keep = [a, b];
    keep.sort_unstable();
    let mut next = 0usize;
    for fd in keep.into_iter().filter(|fd| *fd >= 0) {
        let fd = fd as usize;
        if fd > next {
            sys::call(libc::SYS_close_range, [next, fd - 1, 0, 0, 0, 0]);
        }
        next = fd + 1;
    }
    sys::call(libc::SYS_close_range, [next, u32::MAX as usize, 0, 0, 0, 0]);
}

/// The helper's mapping; unmapped on drop unless given away.
struct Area(*mut u8);

impl Area {
    fn new() -> Option<Area> {
        const _: () = assert!(std::mem::size_of::<Job>() + 16 * 1024 <= AREA);
        // SAFETY: an anonymous private mapping, owned by the returned Area.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                AREA,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then(|| Area(ptr.cast()))
    }

    fn job(&self) -> *mut Job {
        self.0.cast()
    }

    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, the initial stack pointer.
        unsafe { self.0.add(AREA).cast() }
    }

    /// The helper unmaps it when it is done.
    fn give_to_helper(self) {
        std::mem::forget(self);
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no child uses it (none started, or it failed).
        unsafe { libc::munmap(self.0.cast(), AREA) };
    }
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

/// System calls without libc, for the helper: the result, or `-errno`.
mod sys {
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn call(number: libc::c_long, args: [usize; 6]) -> isize {
        let result: isize;
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") args[0], in("rsi") args[1], in("rdx") args[2],
            in("r10") args[3], in("r8") args[4], in("r9") args[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
        result
    }

    /// `munmap(addr, len)` and `exit(0)`, touching no memory in between: the stack being
    /// unmapped is the one this runs on.
    #[cfg(target_arch = "x86_64")]
    pub(super) unsafe fn unmap_and_exit(addr: usize, len: usize) -> ! {
        std::arch::asm!(
            "syscall",
            "mov eax, {exit}",
            "xor edi, edi",
            "syscall",
            exit = const libc::SYS_exit,
            in("rax") libc::SYS_munmap, in("rdi") addr, in("rsi") len,
            options(noreturn, nostack),
        )
    }

    #[cfg(target_arch = "aarch64")]
    pub(super) unsafe fn call(number: libc::c_long, args: [usize; 6]) -> isize {
        let result: isize;
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") args[0] as isize => result,
            in("x1") args[1], in("x2") args[2], in("x3") args[3], in("x4") args[4], in("x5") args[5],
            options(nostack),
        );
        result
    }

    #[cfg(target_arch = "aarch64")]
    pub(super) unsafe fn unmap_and_exit(addr: usize, len: usize) -> ! {
        std::arch::asm!(
            "svc 0",
            "mov x8, {exit}",
            "mov x0, xzr",
            "svc 0",
            exit = const libc::SYS_exit,
            in("x8") libc::SYS_munmap, in("x0") addr, in("x1") len,
            options(noreturn, nostack),
        )
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(super) unsafe fn call(_: libc::c_long, _: [usize; 6]) -> isize {
        unreachable!("detach() hands nothing off on this architecture")
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(super) unsafe fn unmap_and_exit(_: usize, _: usize) -> ! {
        unreachable!("detach() hands nothing off on this architecture")
    }
}
