//! System calls without libc, for code that runs where libc cannot be used: the detach
//! helper (libc's wrappers set `errno`, which lives in thread-local storage, and the
//! helper's thread pointer is still the thread's that cloned it: through libc it would
//! write that thread's memory) and the agent relay (which runs before libc has started).
//! These write nothing but the registers and what the call itself is given.
//!
//! Each is `#[inline(always)]` so that their callers are straight-line code and system
//! calls (see [`NoPanic`]).

/// System call `number` with six arguments: the result, or `-errno`.
///
/// # Safety
/// The arguments must be valid for that system call: every pointer among them must point
/// to memory the call may read or write, for as long as the call runs.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn call(number: libc::c_long, args: [usize; 6]) -> isize {
    let result: isize;
    // SAFETY: the `syscall` instruction with the kernel's x86_64 convention; it clobbers
    // only rcx and r11 (declared), and what it reads or writes through the arguments is the
    // caller's promise. No `nomem`: the compiler must assume memory is read and written.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") args[0], in("rsi") args[1], in("rdx") args[2],
            in("r10") args[3], in("r8") args[4], in("r9") args[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// `munmap(addr, len)` and `exit(0)`, touching no memory in between: the stack being
/// unmapped is the one this runs on.
///
/// # Safety
/// `addr..addr + len` must be a mapping nothing else uses, the caller's stack included
/// (which is why nothing runs after the unmap but the exit).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn unmap_and_exit(addr: usize, len: usize) -> ! {
    // SAFETY: two system calls in a row, registers only: after the munmap no instruction
    // reads or writes memory, and exit (of this task only, not its thread group: the
    // helper is a process of its own) does not return.
    unsafe {
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
}

/// See the x86_64 version.
///
/// # Safety
/// As for the x86_64 version.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) unsafe fn call(number: libc::c_long, args: [usize; 6]) -> isize {
    let result: isize;
    // SAFETY: `svc 0` with the kernel's aarch64 convention (number in x8, result in x0);
    // it clobbers no other register. Memory as for the x86_64 version.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") args[0] as isize => result,
            in("x1") args[1], in("x2") args[2], in("x3") args[3], in("x4") args[4], in("x5") args[5],
            options(nostack),
        );
    }
    result
}

/// See the x86_64 version.
///
/// # Safety
/// As for the x86_64 version.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) unsafe fn unmap_and_exit(addr: usize, len: usize) -> ! {
    // SAFETY: as for the x86_64 version.
    unsafe {
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
}

/// Never called: `detach` hands nothing off on other architectures.
///
/// # Safety
/// None needed; it only aborts.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) unsafe fn call(_: libc::c_long, _: [usize; 6]) -> isize {
    std::process::abort()
}

/// Never called: `detach` hands nothing off on other architectures.
///
/// # Safety
/// None needed; it only aborts.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) unsafe fn unmap_and_exit(_: usize, _: usize) -> ! {
    std::process::abort()
}

/// Makes a way for code that must not unwind to unwind a link error in optimised builds
/// (the trick of the `no-panic` crate): the landing pad that would drop this on unwinding
/// calls a function that does not exist. The code forgets it on each of its ways out, so
/// with no unwinding path the call is dead code and gone. Debug builds keep landing pads
/// for calls that cannot actually unwind, so it checks nothing there; nor with
/// `panic = "abort"`.
pub(crate) struct NoPanic;

impl Drop for NoPanic {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(not(debug_assertions))]
        {
            extern "C" {
                #[link_name = "\n\ncni-os: code guarded by NoPanic (the detach helper, the agent relay) has a path that can panic\n\n"]
                fn code_guarded_by_no_panic_can_panic() -> !;
            }
            // SAFETY: never runs (see above); if it is linked at all, linking fails.
            unsafe { code_guarded_by_no_panic_can_panic() }
        }
    }
}
