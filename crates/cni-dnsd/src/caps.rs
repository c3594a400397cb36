//! Giving up privileges: after start the resolver keeps only CAP_NET_BIND_SERVICE (it binds
//! port 53 on gateways of networks made later), and sets no_new_privs. It stays uid 0 so it
//! can read the root-owned state directory without CAP_DAC_OVERRIDE.
//!
//! capset(2) changes the calling thread only, so this runs before any thread is started;
//! every thread made afterwards inherits the reduced sets.

pub const CAP_NET_BIND_SERVICE: u32 = 10;

/// Reduces the effective and permitted sets to `keep` and sets no_new_privs.
pub fn keep_only(keep: &[u32]) -> std::io::Result<()> {
    cni_os::privileges::keep_only_capabilities(keep)
}
