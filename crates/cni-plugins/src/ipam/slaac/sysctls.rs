//! The per-interface IPv6 settings a container interface needs to autoconfigure from
//! router advertisements, changed only where they differ and put back by a guard when the
//! ADD fails.
//!
//! Address generation is EUI-64 (`addr_gen_mode` 0): the interface identifier comes from
//! the interface's MAC, which is random per attachment unless the runtime pins one (then
//! the address is pinned with it, which is what a pinned MAC is usually for). Stable
//! privacy (mode 2) needs a secret to manage, and the kernel mixes in the device's
//! permanent address, which veth and macvlan devices do not have: every container on a
//! prefix would derive the same identifier and all but the first would fail DAD.

use crate::common::rollback::{Rollback, Undo};
use crate::common::NetResultExt;
use cni_net::sysctl;
use cni_net::{Idempotent, NetNs};
use cni_sdk::{CniError, ErrorCode};

/// The kernel's default bound on autoconfigured addresses per interface (link-local
/// included); a namespace default of 0 (no bound) would let a router flood the interface.
pub const MAX_ADDRESSES: u32 = 16;

fn key(ifname: &str, leaf: &str) -> String {
    format!("net/ipv6/conf/{ifname}/{leaf}")
}

/// What one setting must be, given its current value; `None`: it is fine as it is.
fn wanted(leaf: &str, current: &str, forwarding: bool) -> Option<String> {
    let current = current.trim();
    let want = match leaf {
        // A forwarding interface takes advertisements only with accept_ra=2; the
        // container's forwarding is its own business and stays as it is.
        "accept_ra" if forwarding => "2".to_string(),
        "accept_ra" if current == "0" => "1".to_string(),
        "accept_ra" => return None,
        "max_addresses" => match current.parse::<u32>() {
            Ok(n) if (1..=MAX_ADDRESSES).contains(&n) => return None,
            _ => MAX_ADDRESSES.to_string(),
        },
        "disable_ipv6" | "use_tempaddr" | "addr_gen_mode" => "0".to_string(),
        _ => "1".to_string(), // autoconf, accept_ra_pinfo, accept_ra_defrtr
    };
    (want != current).then_some(want)
}

/// In order: IPv6 on, address generation settled before the link (maybe) comes up.
const LEAVES: [&str; 8] = [
    "disable_ipv6",
    "addr_gen_mode",
    "use_tempaddr",
    "max_addresses",
    "accept_ra",
    "accept_ra_pinfo",
    "accept_ra_defrtr",
    "autoconf",
];

/// Settings changed by [`enable`], with their old values; put back by their [`Rollback`]
/// unless kept.
pub struct Enabled<'a> {
    ns: &'a NetNs,
    changed: Vec<(String, String)>,
}

/// Turns on what autoconfiguration needs on `ifname` in `ns`.
pub fn enable<'a>(ns: &'a NetNs, ifname: &str) -> Result<Rollback<Enabled<'a>>, CniError> {
    let mut guard = Rollback::new(Enabled { ns, changed: Vec::new() });
    let changed = ns
        .run(|| -> Result<Vec<(String, String)>, CniError> {
            let mut changed = Vec::new();
            let forwarding = sysctl::read(&key(ifname, "forwarding")).map_err(|e| {
                let code = if e.is_not_found() { ErrorCode::InvalidConfig } else { ErrorCode::Internal };
                CniError::new(code, format!("slaac: {ifname} has no IPv6 settings (is IPv6 off here?): {e}"))
            })?;
            for leaf in LEAVES {
                let k = key(ifname, leaf);
                let current = sysctl::read(&k).or_cni(&format!("read {k}"))?;
                if let Some(value) = wanted(leaf, &current, forwarding.trim() != "0") {
                    if let Err(e) = sysctl::write(&k, &value) {
                        // The guard is not armed with these yet: put them back here.
                        put_back(&changed);
                        return Err(CniError::internal(format!("set {k}={value}: {e}")));
                    }
                    changed.push((k, current));
                }
            }
            Ok(changed)
        })
        .or_cni("enter the container")??;
    guard.changed = changed;
    Ok(guard)
}

fn put_back(changed: &[(String, String)]) {
    for (k, old) in changed.iter().rev() {
        if let Err(e) = sysctl::write(k, old).ignore_missing() {
            eprintln!("slaac: rollback: cannot put back {k}={old}: {e}");
        }
    }
}

impl Undo for Enabled<'_> {
    fn undo(&mut self) {
        if !self.changed.is_empty() {
            if let Err(e) = self.ns.run(|| put_back(&self.changed)) {
                eprintln!("slaac: rollback: cannot enter the container: {e}");
            }
        }
    }
}

/// DEL: the interface stops taking addresses from routers (the addresses themselves are
/// removed by the caller). An interface or namespace without IPv6 has nothing to stop.
pub fn disable_autoconf(ns: &NetNs, ifname: &str) -> Result<(), CniError> {
    ns.run(|| sysctl::write(&key(ifname, "autoconf"), "0").ignore_missing().map(drop))
        .or_cni("enter the container")?
        .or_cni(&format!("turn off autoconf on {ifname}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_differing_settings_are_changed() {
        assert_eq!(wanted("accept_ra", "1", false), None);
        assert_eq!(wanted("accept_ra", "0", false).as_deref(), Some("1"));
        assert_eq!(wanted("accept_ra", "1", true).as_deref(), Some("2"));
        assert_eq!(wanted("accept_ra", "2", true), None);
        assert_eq!(wanted("autoconf", "0", false).as_deref(), Some("1"));
        assert_eq!(wanted("autoconf", "1\n", false), None);
        assert_eq!(wanted("addr_gen_mode", "2", false).as_deref(), Some("0"));
        assert_eq!(wanted("max_addresses", "16", false), None);
        assert_eq!(wanted("max_addresses", "4", false), None);
        assert_eq!(wanted("max_addresses", "0", false).as_deref(), Some("16"));
        assert_eq!(wanted("max_addresses", "100000", false).as_deref(), Some("16"));
    }
}
