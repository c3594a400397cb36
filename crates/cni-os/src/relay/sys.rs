//! The relay's system calls, made directly (no libc: it has not started yet), each
//! returning what the relay needs to decide, never an `errno`.

use crate::raw;

use super::wire::{all, Writer};
use super::{MAPPING, SOCKADDR_LEN};

/// One anonymous mapping for every buffer; the kernel hands its pages out zeroed as they
/// are first touched.
pub(super) struct Mapping {
    pub(super) bytes: &'static mut [u8],
}

impl Mapping {
    #[inline(always)]
    pub(super) fn new() -> Option<Mapping> {
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

/// A memory file, close-on-exec (the relay's own until it is made descriptor 0).
#[inline(always)]
pub(super) fn memfd_create() -> Option<i32> {
    const NAME: &[u8] = b"stdin\0";
    // SAFETY: memfd_create reads the NUL-terminated name.
    let fd = unsafe {
        raw::call(libc::SYS_memfd_create, [NAME.as_ptr() as usize, libc::MFD_CLOEXEC as usize, 0, 0, 0, 0])
    };
    (fd >= 0).then_some(fd as i32)
}

/// Makes `fd` descriptor 0, read from its start.
#[inline(always)]
pub(super) fn rewind_as_stdin(fd: i32) {
    // SAFETY: lseek and dup2 on descriptors of this process only.
    unsafe {
        raw::call(libc::SYS_lseek, [fd as usize, 0, libc::SEEK_SET as usize, 0, 0, 0]);
        raw::call(libc::SYS_dup2, [fd as usize, 0, 0, 0, 0, 0]);
    }
}

#[inline(always)]
pub(super) fn close(fd: i32) {
    // SAFETY: closes a descriptor of this process the relay is done with.
    unsafe { raw::call(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) };
}

/// A connected unix stream socket with send and receive timeouts, or `None`.
#[inline(always)]
pub(super) fn connect(path: &[u8], sockaddr: &mut [u8], timeout_ms: u64) -> Option<i32> {
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

#[inline(always)]
pub(super) fn read(fd: i32, into: &mut [u8]) -> isize {
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
pub(super) fn read_to_end(fd: i32, area: &mut [u8]) -> Option<usize> {
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
pub(super) fn write_all(fd: i32, bytes: &[u8]) -> bool {
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
pub(super) fn exit(status: i32) -> ! {
    // SAFETY: exit_group ends the process; it touches no memory.
    unsafe { raw::call(libc::SYS_exit_group, [status as usize, 0, 0, 0, 0, 0]) };
    // exit_group does not return; should it, a fault is the only honest way out.
    loop {
        core::hint::spin_loop();
    }
}
