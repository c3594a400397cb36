//! Giving up privileges: after start the resolver keeps only CAP_NET_BIND_SERVICE (it binds
//! port 53 on gateways of networks made later), and sets no_new_privs. It stays uid 0 so it
//! can read the root-owned state directory without CAP_DAC_OVERRIDE.
//!
//! capset(2) changes the calling thread only, so this runs before any thread is started;
//! every thread made afterwards inherits the reduced sets.

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
pub const CAP_NET_BIND_SERVICE: u32 = 10;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Reduces the effective and permitted sets to `keep` (capability numbers below 32).
pub fn keep_only(keep: &[u32]) -> std::io::Result<()> {
    let mask = keep.iter().fold(0u32, |m, c| m | (1 << c));
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: mask, permitted: mask, inheritable: 0 }, CapData::default()];
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: capset reads a v3 header and two data structs, both valid for the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
