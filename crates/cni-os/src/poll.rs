//! Waiting for descriptors to become ready (`poll(2)`), and making them non-blocking.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

pub use rustix::event::{PollFd, PollFlags};

/// Waits up to `timeout` for any of `fds` to be ready; returns how many are (each one's
/// `revents()` says what happened). A signal interrupting the wait counts as "none yet".
pub fn wait(fds: &mut [PollFd<'_>], timeout: Duration) -> io::Result<usize> {
    let timeout = rustix::time::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match rustix::event::poll(fds, Some(&timeout)) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Whether `fd` becomes readable (or hung up) within `timeout`.
pub fn readable(fd: impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    Ok(wait(&mut fds, timeout)? > 0 && !fds[0].revents().is_empty())
}

/// Makes reads and writes on `fd` return `WouldBlock` instead of waiting.
pub fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, true)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn readable_once_data_is_there_and_non_blocking_reads_do_not_wait() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        assert!(!readable(&b, Duration::ZERO).unwrap());
        set_nonblocking(&b).unwrap();
        assert_eq!(b.read(&mut [0u8; 4]).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        a.write_all(b"x").unwrap();
        assert!(readable(&b, Duration::from_secs(10)).unwrap());
        let mut fds = [PollFd::new(&a, PollFlags::OUT), PollFd::new(&b, PollFlags::IN)];
        assert_eq!(wait(&mut fds, Duration::ZERO).unwrap(), 2);
    }
}
