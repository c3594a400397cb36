//! The helper process: its mapping, how it is started, and the code it runs.
//!
//! The helper shares this process's memory and runs while this process goes on, so what
//! it runs is held to these rules, each enforced as said:
//!
//! - **Its own memory only.** It reads its [`Job`] and uses its stack, both in a mapping
//!   made for it ([`Area`]), which it unmaps as it exits. It makes system calls directly
//!   ([`sys`]), never through libc, whose wrappers write `errno` in the cloning thread's
//!   thread-local storage (the helper still has that thread's thread pointer).
//! - **No allocation, no panic.** A panic would format a message, lock and write stderr
//!   and allocate: all in memory this process is using, maybe holding its locks. So the
//!   helper's code is raw system calls and plain integer operations: no slicing or
//!   indexing with bounds checks, no `unwrap`, no iterators, no calls into std or libc;
//!   arithmetic that could overflow is `wrapping_*` (it cannot, but then not even a
//!   debug build has an overflow check there). Its functions are `#[inline(always)]`
//!   into [`helper`], and optimised builds check at link time that nothing in it can
//!   unwind ([`NoPanic`]).
//! - **A guard page.** Its stack grows down from just under the Job (at the top of the
//!   mapping) toward a `PROT_NONE` page at the bottom: an overflow faults there rather
//!   than writing whatever this process mapped below.
//! - **Signals blocked.** It starts with every signal blocked (this thread blocks them
//!   all around the clone, then restores its mask), so no handler of this process ever
//!   runs on the helper's stack with this thread's thread pointer. A fault (SIGSEGV on the
//!   guard page) is not held back: the kernel kills a task that faults with the signal
//!   blocked. SIGKILL and SIGSTOP cannot be blocked: a killed helper's descriptor is
//!   closed by the kernel and only its mapping stays (64 KiB, until this process exits);
//!   a stopped one holds its descriptor until continued.
//! - **Descriptors.** It closes every descriptor but the one or two it keeps:
//!   `close_range` (Linux 5.9), or, where that fails (an older kernel, a seccomp filter
//!   that refuses it), one `close` per descriptor number below the `RLIMIT_NOFILE` soft
//!   limit (a descriptor numbered above it, opened before the limit was lowered, would
//!   stay open until the helper exits).

use crate::raw as sys;
use crate::raw::NoPanic;
use std::os::fd::RawFd;

/// The largest request a helper sends (a link deletion is ~40 bytes).
pub(super) const MAX_REQUEST: usize = 1024;
/// The helper's mapping above its guard page: its stack, and its [`Job`] at the top.
const AREA: usize = 64 * 1024;
/// Stack space the helper is sure to have; it needs a few hundred bytes.
const MIN_STACK: usize = 16 * 1024;
const _: () = assert!(std::mem::size_of::<Job>() + 64 + MIN_STACK <= AREA);

/// Everything the helper needs, at the top of its mapping.
#[repr(C)]
struct Job {
    fd: RawFd,
    /// The pipe end a waiting helper reads to EOF; -1 for a sending one.
    wait_end: RawFd,
    on_tick: bool,
    /// At most [`MAX_REQUEST`]; 0 when waiting.
    request_len: usize,
    request: [u8; MAX_REQUEST],
    /// The whole mapping, guard page included, which the helper unmaps as it exits.
    mapping: usize,
    mapping_len: usize,
}

/// A started helper: its pid and the mapping it owns (for tests).
pub(super) struct Spawned {
    pub(super) pid: libc::pid_t,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) mapping: std::ops::Range<usize>,
}

/// What a helper does with `fd`.
pub(super) enum Work<'a> {
    /// Sends `request` (at most [`MAX_REQUEST`] bytes) on it, then closes it.
    Send(&'a [u8]),
    /// Reads `wait_end` to EOF, then sleeps until the next close tick if `on_tick`, then
    /// closes `fd`.
    CloseAfterEof { wait_end: RawFd, on_tick: bool },
}

/// Starts a helper that does `work` on `fd` and exits. `None` if none could be started:
/// nothing was done.
pub(super) fn spawn(fd: RawFd, work: Work<'_>) -> Option<Spawned> {
    let (request, wait_end, on_tick) = match work {
        Work::Send(request) if request.len() > MAX_REQUEST => return None,
        Work::Send(request) => (request, -1, false),
        Work::CloseAfterEof { wait_end, on_tick } => (&[][..], wait_end, on_tick),
    };
    let area = Area::new()?;
    let job = area.job();
    // SAFETY: `job` is inside the fresh mapping, writable, aligned for a Job and clear of
    // the guard page (Area::job); nobody else sees the mapping until the clone below.
    unsafe {
        job.write(Job {
            fd,
            wait_end,
            on_tick,
            request_len: request.len(),
            request: [0; MAX_REQUEST],
            mapping: area.base as usize,
            mapping_len: area.len,
        });
        (&mut (*job).request)[..request.len()].copy_from_slice(request);
    }
    // The raw system call, not pthread_sigmask: glibc's leaves its two internal signals
    // unblocked, and their handlers are glibc code that uses thread-local state.
    let all: u64 = !0;
    let mut saved: u64 = 0;
    let set = libc::SIG_SETMASK as usize;
    let sigset_size = std::mem::size_of::<u64>(); // the kernel's sigset_t: 64 signals
                                                  // SAFETY: rt_sigprocmask reads `all` and writes `saved`, both ours and 8 bytes long.
    let blocked = unsafe {
        let args = [set, &all as *const u64 as usize, &mut saved as *mut u64 as usize, sigset_size, 0, 0];
        sys::call(libc::SYS_rt_sigprocmask, args)
    };
    if blocked != 0 {
        return None; // `area` is unmapped on drop.
    }
    // SAFETY: `helper` runs on the area's stack (which ends under the Job) and reads only
    // the Job; it follows the rules in the module docs. No CLONE_FILES: it gets a copy of
    // the descriptor table, whose extra entries it closes. Exit signal 0: its end concerns
    // nobody, and __WCLONE finds it (see `reap_finished_helpers`).
    let pid = unsafe { libc::clone(helper, area.stack_top(), libc::CLONE_VM, job.cast()) };
    // SAFETY: rt_sigprocmask reads `saved`, this thread's mask from before.
    unsafe {
        sys::call(libc::SYS_rt_sigprocmask, [set, &saved as *const u64 as usize, 0, sigset_size, 0, 0])
    };
    if pid <= 0 {
        return None;
    }
    let mapping = area.base as usize..area.base as usize + area.len;
    area.give_to_helper();
    Some(Spawned { pid, mapping })
}

/// The helper. Straight-line system calls on its own memory (see the module docs).
extern "C" fn helper(job: *mut libc::c_void) -> libc::c_int {
    let no_panic = NoPanic;
    // SAFETY: the Job `spawn` wrote before the clone; nobody writes it afterwards, and it
    // stays mapped until the unmap at the end.
    let job = unsafe { &*(job as *const Job) };
    // SAFETY: the helper's descriptor table is its own copy; it needs none but these two.
    unsafe { keep_only(job.fd, job.wait_end) };
    if job.wait_end < 0 {
        let request = job.request.as_ptr() as usize;
        // SAFETY: sendto reads `request_len` (at most MAX_REQUEST, checked by `spawn`)
        // bytes of the Job's request. Its outcome is the caller's to check (Tail::Send).
        unsafe { sys::call(libc::SYS_sendto, [job.fd as usize, request, job.request_len, 0, 0, 0]) };
    } else {
        read_to_eof(job.wait_end);
        if job.on_tick {
            sleep_until_close_tick();
        }
    }
    // SAFETY: closes the helper's own copy of the descriptor.
    unsafe { sys::call(libc::SYS_close, [job.fd as usize, 0, 0, 0, 0, 0]) };
    std::mem::forget(no_panic);
    // SAFETY: the mapping is the helper's alone (given away by `spawn`), and nothing runs
    // after the unmap but the exit; the two values are in registers before it.
    unsafe { sys::unmap_and_exit(job.mapping, job.mapping_len) }
}

/// Closes every descriptor except `a` and `b` (`-1` for none).
///
/// # Safety
/// Only for the helper, which owns nothing else.
#[inline(always)]
unsafe fn keep_only(a: RawFd, b: RawFd) {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    // The ranges around the kept ones; `next` is the first not yet covered. A kept
    // descriptor is at most i32::MAX, so `+ 1` stays within u32, and `- 1` is applied only
    // to one greater than `next`: the wrapping operations never wrap.
    let mut next: u32 = 0;
    let mut closed = true;
    if low >= 0 {
        let low = low as u32;
        if low > next {
            closed &= close_range(next, low.wrapping_sub(1));
        }
        next = low.wrapping_add(1);
    }
    if high >= 0 && high as u32 >= next {
        let high = high as u32;
        if high > next {
            closed &= close_range(next, high.wrapping_sub(1));
        }
        next = high.wrapping_add(1);
    }
    closed &= close_range(next, u32::MAX);
    if !closed {
        close_one_by_one_except(a, b);
    }
}

/// `close_range(first, last, 0)`; whether it worked.
#[inline(always)]
fn close_range(first: u32, last: u32) -> bool {
    // SAFETY: close_range touches no memory; it closes the helper's own descriptors.
    unsafe { sys::call(libc::SYS_close_range, [first as usize, last as usize, 0, 0, 0, 0]) == 0 }
}

/// The fallback for [`keep_only`]: every descriptor number below the `RLIMIT_NOFILE` soft
/// limit, one `close` each.
#[inline(always)]
fn close_one_by_one_except(a: RawFd, b: RawFd) {
    let mut limit = libc::rlimit64 { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: prlimit64 of this process (pid 0) writes the current limit into `limit`.
    let got = unsafe {
        let args = [0, libc::RLIMIT_NOFILE as usize, 0, &mut limit as *mut _ as usize, 0, 0];
        sys::call(libc::SYS_prlimit64, args)
    };
    // Without it, the kernel's default ceiling (fs.nr_open); no limit can exceed nr_open.
    let end = if got == 0 && limit.rlim_cur < 1 << 31 { limit.rlim_cur } else { 1 << 20 };
    let mut fd: u64 = 0;
    while fd < end {
        if fd != a as u64 && fd != b as u64 {
            // SAFETY: closes one of the helper's own descriptors, or fails with EBADF.
            unsafe { sys::call(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
        }
        fd = fd.wrapping_add(1); // below `end` < 2^31
    }
}

/// Reads `fd` until end of file (or an error other than EINTR).
#[inline(always)]
fn read_to_eof(fd: RawFd) {
    let mut byte = 0u8;
    let buffer = &mut byte as *mut u8 as usize;
    loop {
        // SAFETY: read writes at most one byte into `byte`, on the helper's stack.
        let n = unsafe { sys::call(libc::SYS_read, [fd as usize, buffer, 1, 0, 0, 0]) };
        if n == 0 || (n < 0 && n != -(libc::EINTR as isize)) {
            break;
        }
    }
}

/// Close ticks: every waiting helper on the machine whose client deleted something closes
/// its descriptor at the next multiple of this on the system-wide monotonic clock.
///
/// Why: releasing an nfnetlink socket flushes the namespace's pending nf_tables
/// destruction *while holding its commit mutex*, and that destruction waits for an RCU
/// grace period when the commit deleted anything. A release right after each DEL's commit
/// (as plugins in a chain do, one after the other) thus blocked the next plugin's commit
/// for a grace period: 8–10 ms of each of firewall, portmap and bridge DEL in the podman
/// chain. Released together, the first release of a tick waits for the flush and the
/// others find nothing pending, so commits are blocked once per tick at most, not once
/// per plugin. A helper lives at most this long plus [`CLOSE_MIN_WAIT_NS`].
pub(super) const CLOSE_TICK_NS: i64 = 100_000_000;
/// The least a helper waits before its tick: about one grace period, so that its own
/// commit's destruction has usually run by then.
const CLOSE_MIN_WAIT_NS: i64 = 10_000_000;

/// Sleeps until the next close tick at least [`CLOSE_MIN_WAIT_NS`] away.
#[inline(always)]
fn sleep_until_close_tick() {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let clock = libc::CLOCK_MONOTONIC as usize;
    // SAFETY: clock_gettime writes one timespec into `now`, on the helper's stack.
    unsafe { sys::call(libc::SYS_clock_gettime, [clock, &mut now as *mut _ as usize, 0, 0, 0, 0]) };
    // Monotonic time is far from overflowing; the divisions are by non-zero constants.
    let now_ns = now.tv_sec.wrapping_mul(1_000_000_000).wrapping_add(now.tv_nsec);
    let tick = now_ns.wrapping_add(CLOSE_MIN_WAIT_NS) / CLOSE_TICK_NS;
    let target = tick.wrapping_add(1).wrapping_mul(CLOSE_TICK_NS);
    let until = libc::timespec { tv_sec: target / 1_000_000_000, tv_nsec: target % 1_000_000_000 };
    let args = [clock, libc::TIMER_ABSTIME as usize, &until as *const _ as usize, 0, 0, 0];
    // SAFETY: clock_nanosleep reads `until`, on the helper's stack.
    while unsafe { sys::call(libc::SYS_clock_nanosleep, args) } == -(libc::EINTR as isize) {}
}

/// The helper's mapping, `len` bytes from `base`: a guard page, then its stack, then its
/// Job. Unmapped on drop unless given to the helper.
struct Area {
    base: *mut u8,
    len: usize,
}

impl Area {
    fn new() -> Option<Area> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        // AREA is a multiple of any power-of-two page size up to itself.
        let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two() && *p <= AREA)?;
        let len = page + AREA;
        // SAFETY: a new anonymous private mapping, owned by the returned Area.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let area = Area { base: base.cast(), len };
        // SAFETY: the first page of the mapping just made, which nothing uses.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return None; // unmapped on drop
        }
        Some(area)
    }

    /// Where the Job goes: the top of the mapping, 64-byte aligned, far above the guard
    /// page (`AREA` leaves room for it and `MIN_STACK`).
    fn job(&self) -> *mut Job {
        let end = self.base as usize + self.len;
        let at = (end - std::mem::size_of::<Job>()) & !63;
        // Derived from `base` so the pointer keeps the mapping's provenance.
        self.base.wrapping_add(at - self.base as usize).cast()
    }

    /// The helper's initial stack pointer: just under its Job; the stack grows down
    /// toward the guard page.
    fn stack_top(&self) -> *mut libc::c_void {
        self.job().cast()
    }

    /// The helper unmaps it when it is done.
    fn give_to_helper(self) {
        std::mem::forget(self);
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no helper uses it (none started).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
