//! Secret random bytes from the kernel (`getrandom(2)`): keys and anything else an attacker
//! must not guess. Blocks only until the kernel's pool is first initialised at boot.

use std::io;

/// Fills `buf` with random bytes from the kernel's CSPRNG, retrying short reads and
/// interrupted calls.
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `N` random bytes (see [`fill`]).
pub fn bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    fill(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_draws_differ_and_are_not_zero() {
        let (a, b) = (bytes::<32>().unwrap(), bytes::<32>().unwrap());
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 32]);
    }

    #[test]
    fn an_empty_buffer_is_filled_at_once() {
        fill(&mut []).unwrap();
    }
}
