//! Dummy links: an interface with no wire behind it, for addresses that must exist
//! without connectivity (the `dummy` plugin).

use netlink_packet_route::link::InfoKind;

use super::{Link, LinkSpec, Netlink};
use crate::error::Result;

impl Netlink {
    /// Creates a dummy link; returns it when it is in this socket's namespace.
    pub fn add_dummy(&mut self, spec: &LinkSpec<'_>) -> Result<Option<Link>> {
        self.create_link(spec, InfoKind::Dummy, None, Vec::new())?;
        self.created(spec)
    }
}
