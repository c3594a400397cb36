//! Randomness from the kernel (`getrandom(2)`): one failure policy for the workspace.
//! A signal interrupting the call is retried; any other failure (a seccomp filter
//! refusing the syscall, say) is returned, since retrying it would loop forever. Callers
//! decide what a missing random value costs them.

use std::io;

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `N` random bytes.
pub fn bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    fill(&mut buf)?;
    Ok(buf)
}

/// A random `u16`.
pub fn u16() -> io::Result<u16> {
    bytes().map(u16::from_ne_bytes)
}

/// A random `u32`.
pub fn u32() -> io::Result<u32> {
    bytes().map(u32::from_ne_bytes)
}

/// A random `u64`.
pub fn u64() -> io::Result<u64> {
    bytes().map(u64::from_ne_bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_differ_from_call_to_call() {
        // 64 random bits twice alike would be a broken source, not luck.
        assert_ne!(super::u64().unwrap(), super::u64().unwrap());
        let big = super::bytes::<4096>().unwrap();
        assert!(big.iter().any(|b| *b != 0), "a long buffer is filled, not left zero");
    }
}
