//! Giving up privileges for good: a daemon that needs one capability keeps that one.

use std::io;

/// Sets `no_new_privs` (nothing executed later can gain privileges) and reduces this
/// thread's effective and permitted capabilities to `keep` (capability numbers, such as
/// 10 for CAP_NET_BIND_SERVICE); the inheritable set is emptied. `capset(2)` changes the
/// calling thread only, so call this before starting threads: those made later inherit
/// the reduced sets.
pub fn keep_only_capabilities(keep: &[u32]) -> io::Result<()> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let mut mask = CapabilitySet::empty();
    for &cap in keep {
        if cap >= 64 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no capability {cap}")));
        }
        mask |= CapabilitySet::from_bits_retain(1 << cap);
    }
    rustix::thread::set_no_new_privs(true)?;
    let sets = CapabilitySets { effective: mask, permitted: mask, inheritable: CapabilitySet::empty() };
    Ok(rustix::thread::set_capabilities(None, sets)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_keeps_only_what_it_asked_for() {
        // On a thread of its own: the reduction is per thread and must not leak into the
        // other tests of this binary.
        std::thread::spawn(|| {
            super::keep_only_capabilities(&[10]).unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let field = |name: &str| {
                let line = status.lines().find(|l| l.starts_with(name)).unwrap();
                u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
            };
            assert_eq!(field("CapEff:"), 1 << 10);
            assert_eq!(field("CapPrm:"), 1 << 10);
            assert_eq!(field("NoNewPrivs:"), 1);
        })
        .join()
        .unwrap();
        assert!(super::keep_only_capabilities(&[64]).is_err());
    }
}
