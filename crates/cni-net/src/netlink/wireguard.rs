//! WireGuard links: the device only; its keys and peers are set over generic netlink
//! ([`crate::wireguard`]).

use netlink_packet_route::link::InfoKind;

use super::{Link, LinkKind, LinkSpec, Netlink};
use crate::error::Result;

/// The kind name the kernel reports for a WireGuard link.
pub const WIREGUARD_KIND: &str = "wireguard";

impl LinkKind {
    /// Whether this is a WireGuard link.
    pub fn is_wireguard(&self) -> bool {
        matches!(self, LinkKind::Other(kind) if kind == WIREGUARD_KIND)
    }
}

impl Netlink {
    /// Creates a WireGuard link (no key, no peers yet); returns it when it is in this
    /// socket's namespace. EOPNOTSUPP when the kernel has no WireGuard.
    pub fn add_wireguard(&mut self, spec: &LinkSpec<'_>) -> Result<Option<Link>> {
        self.create_link(spec, InfoKind::Wireguard, None, Vec::new())?;
        self.created(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_reads_back_as_wireguard() {
        assert!(LinkKind::from_info(&InfoKind::Wireguard).is_wireguard());
        assert!(!LinkKind::Vxlan.is_wireguard());
    }
}
