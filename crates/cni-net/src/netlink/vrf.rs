//! VRF (virtual routing and forwarding) devices: an L3 master whose enslaved interfaces
//! route through the VRF's own routing table instead of the main one.

use netlink_packet_route::link::{InfoData, InfoKind, InfoVrf, LinkMessage};

use super::link::info_data;
use super::{Link, LinkKind, LinkSpec, Netlink};
use crate::error::{Error, Result};

/// A VRF device and the routing table it binds its interfaces to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vrf {
    pub link: Link,
    pub table: u32,
}

/// The table in a VRF's `IFLA_INFO_DATA`.
fn table_of(data: &InfoData) -> Option<u32> {
    match data {
        InfoData::Vrf(items) => items.iter().find_map(|item| match item {
            InfoVrf::TableId(table) => Some(*table),
            _ => None,
        }),
        _ => None,
    }
}

fn vrf_from_message(message: &LinkMessage) -> Option<Vrf> {
    let link = Link::from_message(message);
    if link.kind != LinkKind::Vrf {
        return None;
    }
    let table = info_data(message).and_then(table_of)?;
    Some(Vrf { link, table })
}

impl Netlink {
    /// Creates a VRF bound to routing `table` (down, like any new link); returns it when
    /// it is in this socket's namespace. Table 0 is refused: the kernel has no such table.
    pub fn add_vrf(&mut self, spec: &LinkSpec<'_>, table: u32) -> Result<Option<Link>> {
        if table == 0 {
            return Err(Error::InvalidArgument("a VRF needs a routing table id other than 0".into()));
        }
        self.create_link(
            spec,
            InfoKind::Vrf,
            Some(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
            Vec::new(),
        )?;
        self.created(spec)
    }

    /// Every VRF in the namespace, with its table.
    pub fn vrfs(&mut self) -> Result<Vec<Vrf>> {
        Ok(self.link_messages()?.iter().filter_map(vrf_from_message).collect())
    }

    /// The routing table of VRF `index`; `None` when it is not a VRF (or gone).
    pub fn vrf_table(&mut self, index: u32) -> Result<Option<u32>> {
        Ok(self.link_info_data(index)?.as_ref().and_then(table_of))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::link::{LinkAttribute, LinkInfo};

    #[test]
    fn a_vrf_is_read_with_its_table() {
        let mut message = LinkMessage::default();
        message.header.index = 5;
        message.attributes = vec![
            LinkAttribute::IfName("red".into()),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Vrf),
                LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(1001)])),
            ]),
        ];
        let vrf = vrf_from_message(&message).unwrap();
        assert_eq!((vrf.link.name.as_str(), vrf.link.index, vrf.table), ("red", 5, 1001));
    }

    #[test]
    fn other_links_are_not_vrfs() {
        let mut message = LinkMessage::default();
        message.attributes = vec![LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Dummy)])];
        assert!(vrf_from_message(&message).is_none());
        assert_eq!(table_of(&InfoData::Vrf(vec![])), None);
    }

    #[test]
    fn table_zero_is_refused_before_the_kernel() {
        // No socket is needed: the check comes first.
        let spec = LinkSpec::new("red");
        let err = Netlink::new().and_then(|mut nl| nl.add_vrf(&spec, 0)).unwrap_err();
        assert!(err.to_string().contains("other than 0"), "{err}");
    }
}
