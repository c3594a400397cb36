//! Reading and writing sysctls (`/proc/sys/...`), in a chosen network namespace.
//!
//! Keys may be given with slashes (`net/ipv4/conf/eth0.100/forwarding`, taken literally) or
//! with dots (`net.ipv4.conf.eth0.100.forwarding`). Interface names may contain dots, so a
//! dotted key is not blindly split: under the per-interface trees (`net.ipv4.conf.`,
//! `net.ipv6.conf.`, `net.ipv4.neigh.`, `net.ipv6.neigh.`, `net.mpls.conf.`) the part between
//! the prefix and the *last* dot is the interface name (leaf names never contain dots); every
//! other dotted key has all its dots turned into slashes, as sysctl(8) does.
//!
//! `/proc/sys/net` shows the network namespace of the thread that opens the file, so the
//! namespaced variants open it inside [`NetNs::run`].

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::netns::NetNs;
use crate::Idempotent;

const PROC_SYS: &str = "/proc/sys";

/// Dotted prefixes whose next component is an interface name.
const INTERFACE_TREES: [&str; 5] =
    ["net.ipv4.conf.", "net.ipv6.conf.", "net.ipv4.neigh.", "net.ipv6.neigh.", "net.mpls.conf."];

/// Turns a dotted or slashed key into its path under `/proc/sys`.
pub fn key_to_path(key: &str) -> Result<PathBuf> {
    let relative =
        if key.contains('/') { key.trim_start_matches('/').to_string() } else { dotted_to_relative(key) };
    let invalid = || Error::InvalidArgument(format!("invalid sysctl key {key:?}"));
    if relative.is_empty()
        || relative.contains('\0')
        || relative.split('/').any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(invalid());
    }
    Ok(PathBuf::from(PROC_SYS).join(relative))
}

fn dotted_to_relative(key: &str) -> String {
    for prefix in INTERFACE_TREES {
        if let Some(rest) = key.strip_prefix(prefix) {
            if let Some((interface, leaf)) = rest.rsplit_once('.') {
                return format!("{}/{interface}/{leaf}", prefix.trim_end_matches('.').replace('.', "/"));
            }
        }
    }
    key.replace('.', "/")
}

/// Reads a sysctl in the calling thread's namespace; trailing newline removed.
pub fn read(key: &str) -> Result<String> {
    let path = key_to_path(key)?;
    std::fs::read_to_string(&path)
        .map(|value| value.trim_end_matches('\n').to_string())
        .map_err(|source| Error::Sysctl { key: key.to_string(), source })
}

/// Writes a sysctl in the calling thread's namespace.
pub fn write(key: &str, value: &str) -> Result<()> {
    let path = key_to_path(key)?;
    std::fs::write(&path, value.as_bytes()).map_err(|source| Error::Sysctl { key: key.to_string(), source })
}

/// Reads a sysctl inside `ns`.
pub fn read_in(ns: &NetNs, key: &str) -> Result<String> {
    ns.run(|| read(key))?
}

/// Writes a sysctl inside `ns`.
pub fn write_in(ns: &NetNs, key: &str, value: &str) -> Result<()> {
    ns.run(|| write(key, value))?
}

/// Turns off IPv6 duplicate address detection on `interface` in `ns`, so addresses added
/// later are usable at once instead of after 1–2 s of DAD.
pub fn disable_ipv6_dad(ns: &NetNs, interface: &str) -> Result<()> {
    ns.run(|| disable_ipv6_dad_here(interface))?
}

/// [`disable_ipv6_dad`] in the calling thread's namespace. Where IPv6 is off there is no
/// such setting, and nothing to do.
pub fn disable_ipv6_dad_here(interface: &str) -> Result<()> {
    write(&format!("net/ipv6/conf/{interface}/accept_dad"), "0").ignore_missing().map(drop)
}

/// Enables IPv4 forwarding (`net.ipv4.ip_forward=1`) in `ns`.
pub fn enable_ipv4_forwarding(ns: &NetNs) -> Result<()> {
    write_in(ns, "net/ipv4/ip_forward", "1")
}

/// Enables IPv6 forwarding on all interfaces (`net.ipv6.conf.all.forwarding=1`) in `ns`.
pub fn enable_ipv6_forwarding(ns: &NetNs) -> Result<()> {
    write_in(ns, "net/ipv6/conf/all/forwarding", "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_with_dots_are_kept_whole() {
        assert_eq!(
            key_to_path("net.ipv4.conf.eth0.100.forwarding").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        );
        assert_eq!(
            key_to_path("net.ipv6.neigh.br.0.base_reachable_time_ms").unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/neigh/br.0/base_reachable_time_ms")
        );
    }

    #[test]
    fn plain_dotted_and_slashed_keys() {
        assert_eq!(
            key_to_path("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            key_to_path("net/ipv4/conf/eth0.100/rp_filter").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
    }

    #[test]
    fn traversal_and_empty_keys_are_rejected() {
        for bad in ["", "net/../../etc/passwd", "net..ipv4", "net/ipv4//x", "/"] {
            assert!(key_to_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_a_real_key() {
        let value = read("kernel.ostype").unwrap();
        assert_eq!(value, "Linux");
    }
}
