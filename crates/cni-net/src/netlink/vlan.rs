//! 802.1Q VLAN links on top of a parent device.

use netlink_packet_route::link::{InfoData, InfoKind, InfoVlan, LinkAttribute};

use super::{Link, LinkSpec, Netlink};
use crate::error::{Error, Result};

/// The highest VLAN id a link can carry: 4095 is reserved by 802.1Q.
pub const MAX_VLAN_ID: u16 = 4094;

impl Netlink {
    /// Creates VLAN `vlan_id` on `parent_index` (a device in this socket's namespace); with
    /// `spec.netns` the link is made there directly. Returns it when it is in this socket's
    /// namespace.
    pub fn add_vlan(&mut self, spec: &LinkSpec<'_>, parent_index: u32, vlan_id: u16) -> Result<Option<Link>> {
        if vlan_id > MAX_VLAN_ID {
            return Err(Error::InvalidArgument(format!("VLAN id {vlan_id} is out of range 0-{MAX_VLAN_ID}")));
        }
        self.create_link(
            spec,
            InfoKind::Vlan,
            Some(InfoData::Vlan(vec![InfoVlan::Id(vlan_id)])),
            vec![LinkAttribute::Link(parent_index)],
        )?;
        self.created(spec)
    }
}
