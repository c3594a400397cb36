//! Bridge VLAN filtering: the bridge's `vlan_filtering` switch, the VLANs of each bridge
//! port (and of the bridge device itself, "self"), and 802.1Q ids of VLAN links.
//!
//! Port VLANs travel as `IFLA_AF_SPEC` / `IFLA_BRIDGE_VLAN_INFO` entries in `AF_BRIDGE`
//! link messages: `RTM_SETLINK` adds, `RTM_DELLINK` removes, and an `RTM_GETLINK` dump with
//! `RTEXT_FILTER_BRVLAN_COMPRESSED` reads every port's list back (a range is two entries,
//! its first marked `RANGE_BEGIN` and its last `RANGE_END`). A kernel built without
//! `CONFIG_BRIDGE_VLAN_FILTERING` refuses the switch with `EOPNOTSUPP`.

use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind, InfoVlan,
    LinkAttribute, LinkExtentMask, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::link::{link_message, LinkRef};
use super::vlan::MAX_VLAN_ID;
use super::{context, Netlink};
use crate::error::{Error, Result};

/// A run of VLAN ids `first..=last` on a port, with the port's flags for them. `pvid`
/// (untagged frames entering the port join this VLAN) only ever marks a single id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeVlan {
    pub first: u16,
    pub last: u16,
    pub pvid: bool,
    /// Frames of this VLAN leave the port without a tag.
    pub untagged: bool,
}

impl BridgeVlan {
    /// One tagged VLAN.
    pub fn tagged(vid: u16) -> BridgeVlan {
        BridgeVlan { first: vid, last: vid, pvid: false, untagged: false }
    }

    /// A tagged range `first..=last`.
    pub fn tagged_range(first: u16, last: u16) -> BridgeVlan {
        BridgeVlan { first, last, pvid: false, untagged: false }
    }

    /// An access VLAN: PVID, and untagged on the way out.
    pub fn access(vid: u16) -> BridgeVlan {
        BridgeVlan { first: vid, last: vid, pvid: true, untagged: true }
    }

    pub fn contains(&self, vid: u16) -> bool {
        (self.first..=self.last).contains(&vid)
    }

    fn flags(&self) -> BridgeVlanInfoFlags {
        let mut flags = BridgeVlanInfoFlags::empty();
        if self.pvid {
            flags |= BridgeVlanInfoFlags::Pvid;
        }
        if self.untagged {
            flags |= BridgeVlanInfoFlags::Untagged;
        }
        flags
    }

    /// The `IFLA_BRIDGE_VLAN_INFO` entries: one for a single id, two for a range.
    fn entries(&self) -> Vec<AfSpecBridge> {
        let flags = self.flags();
        if self.first == self.last {
            return vec![AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid: self.first })];
        }
        vec![
            AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeBegin,
                vid: self.first,
            }),
            AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeEnd,
                vid: self.last,
            }),
        ]
    }

    fn validate(&self) -> Result<()> {
        let in_range = |vid: u16| (1..=MAX_VLAN_ID).contains(&vid);
        if !in_range(self.first) || !in_range(self.last) || self.first > self.last {
            return Err(Error::InvalidArgument(format!(
                "VLAN range {}-{} is not within 1-{MAX_VLAN_ID}",
                self.first, self.last
            )));
        }
        if self.pvid && self.first != self.last {
            return Err(Error::InvalidArgument("a PVID is a single VLAN, not a range".into()));
        }
        Ok(())
    }
}

/// A bridge's VLAN switches (`IFLA_BR_VLAN_FILTERING`, `IFLA_BR_VLAN_DEFAULT_PVID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgeVlanSettings {
    pub filtering: bool,
    /// The VLAN a new port joins untagged (PVID); 0 for none.
    pub default_pvid: u16,
}

/// Where VLAN changes apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlanTarget {
    /// A port, by its index (the change goes to its bridge).
    Port(u32),
    /// The bridge device itself (`self`): the VLANs its own stack sends and receives on.
    Bridge(u32),
}

/// The VLANs one bridge port (or a bridge itself) carries, as a dump reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortVlans {
    pub index: u32,
    /// The bridge: for the bridge device's own entry, its own index.
    pub master: Option<u32>,
    pub vlans: Vec<BridgeVlan>,
}

impl PortVlans {
    pub fn carries(&self, vid: u16) -> bool {
        self.vlans.iter().any(|v| v.contains(vid))
    }

    /// The PVID, if the port has one.
    pub fn pvid(&self) -> Option<u16> {
        self.vlans.iter().find(|v| v.pvid).map(|v| v.first)
    }
}

/// Folds a dump's entries (ranges as begin/end pairs) into runs.
fn parse_vlans(entries: &[AfSpecBridge]) -> Vec<BridgeVlan> {
    let mut vlans = Vec::new();
    let mut range_start: Option<u16> = None;
    for entry in entries {
        let AfSpecBridge::VlanInfo(info) = entry else { continue };
        let flags = info.flags;
        if flags.contains(BridgeVlanInfoFlags::RangeBegin) {
            range_start = Some(info.vid);
            continue;
        }
        let first = if flags.contains(BridgeVlanInfoFlags::RangeEnd) {
            range_start.take().unwrap_or(info.vid)
        } else {
            info.vid
        };
        vlans.push(BridgeVlan {
            first,
            last: info.vid,
            pvid: flags.contains(BridgeVlanInfoFlags::Pvid),
            untagged: flags.contains(BridgeVlanInfoFlags::Untagged),
        });
    }
    vlans
}

fn bridge_link_message(target: VlanTarget, vlans: &[BridgeVlan]) -> LinkMessage {
    let (index, flags) = match target {
        VlanTarget::Port(index) => (index, None),
        VlanTarget::Bridge(index) => (index, Some(AfSpecBridge::Flags(BridgeFlag::LowerDev))),
    };
    let mut message = link_message(LinkRef::Index(index));
    message.header.interface_family = AddressFamily::Bridge;
    let spec = flags.into_iter().chain(vlans.iter().flat_map(BridgeVlan::entries)).collect();
    message.attributes.push(LinkAttribute::AfSpecBridge(spec));
    message
}

fn describe(target: VlanTarget, vlans: &[BridgeVlan]) -> String {
    let ids: Vec<String> = vlans
        .iter()
        .map(|v| if v.first == v.last { v.first.to_string() } else { format!("{}-{}", v.first, v.last) })
        .collect();
    let on = match target {
        VlanTarget::Port(index) => format!("port #{index}"),
        VlanTarget::Bridge(index) => format!("bridge #{index} (self)"),
    };
    format!("VLANs {} on {on}", ids.join(","))
}

impl Netlink {
    /// Switches 802.1Q filtering on a bridge on or off (`IFLA_BR_VLAN_FILTERING`).
    pub fn set_bridge_vlan_filtering(&mut self, bridge_index: u32, on: bool) -> Result<()> {
        let mut message = link_message(LinkRef::Index(bridge_index));
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Bridge),
            LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(on)])),
        ]));
        context(self.request(RouteNetlinkMessage::NewLink(message), 0), || {
            format!("set vlan_filtering {} on bridge #{bridge_index}", u8::from(on))
        })
    }

    /// A bridge's VLAN settings; `None` when the link is missing or not a bridge.
    pub fn bridge_vlan_settings(&mut self, bridge_index: u32) -> Result<Option<BridgeVlanSettings>> {
        Ok(self.link_info_data(bridge_index)?.and_then(|data| match data {
            InfoData::Bridge(options) => {
                let mut settings = BridgeVlanSettings::default();
                for option in options {
                    match option {
                        InfoBridge::VlanFiltering(on) => settings.filtering = on,
                        InfoBridge::VlanDefaultPvid(pvid) => settings.default_pvid = pvid,
                        _ => {}
                    }
                }
                Some(settings)
            }
            _ => None,
        }))
    }

    /// The 802.1Q id of a VLAN link; `None` when missing or not a VLAN link.
    pub fn vlan_link_id(&mut self, index: u32) -> Result<Option<u16>> {
        Ok(self.link_info_data(index)?.and_then(|data| match data {
            InfoData::Vlan(options) => options.iter().find_map(|o| match o {
                InfoVlan::Id(id) => Some(*id),
                _ => None,
            }),
            _ => None,
        }))
    }

    fn link_info_data(&mut self, index: u32) -> Result<Option<InfoData>> {
        let request = RouteNetlinkMessage::GetLink(link_message(LinkRef::Index(index)));
        let answers = match self.exchange(request, 0) {
            Ok(answers) => answers,
            Err(err) if matches!(err.errno(), Some(libc::ENODEV | libc::ENOENT)) => return Ok(None),
            Err(source) => return Err(Error::netlink(format!("get link #{index}"), source)),
        };
        Ok(answers.into_iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(message) => message.attributes.into_iter().find_map(|a| match a {
                LinkAttribute::LinkInfo(infos) => infos.into_iter().find_map(|i| match i {
                    LinkInfo::Data(data) => Some(data),
                    _ => None,
                }),
                _ => None,
            }),
            _ => None,
        }))
    }

    /// Adds VLANs to a port or to the bridge itself; adding one already there updates
    /// its flags (a new PVID moves the PVID off the old one).
    pub fn add_bridge_vlans(&mut self, target: VlanTarget, vlans: &[BridgeVlan]) -> Result<()> {
        vlans.iter().try_for_each(BridgeVlan::validate)?;
        let message = bridge_link_message(target, vlans);
        context(self.request(RouteNetlinkMessage::SetLink(message), 0), || {
            format!("add {}", describe(target, vlans))
        })
    }

    /// Removes VLANs from a port or from the bridge itself. An id the target does not carry
    /// fails with `ENOENT`.
    pub fn delete_bridge_vlans(&mut self, target: VlanTarget, vlans: &[BridgeVlan]) -> Result<()> {
        vlans.iter().try_for_each(BridgeVlan::validate)?;
        let message = bridge_link_message(target, vlans);
        context(self.request(RouteNetlinkMessage::DelLink(message), 0), || {
            format!("delete {}", describe(target, vlans))
        })
    }

    /// The VLANs of every bridge port in the namespace, and of every bridge itself. Ports
    /// and bridges without VLANs are listed with none.
    pub fn bridge_port_vlans(&mut self) -> Result<Vec<PortVlans>> {
        let mut message = LinkMessage::default();
        message.header.interface_family = AddressFamily::Bridge;
        message.attributes.push(LinkAttribute::ExtMask(vec![LinkExtentMask::BrvlanCompressed]));
        let replies =
            context(self.dump(RouteNetlinkMessage::GetLink(message)), || "list bridge port VLANs".into())?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(message) => Some(message),
                _ => None,
            })
            .map(|message| {
                let mut port = PortVlans { index: message.header.index, master: None, vlans: Vec::new() };
                for attribute in &message.attributes {
                    match attribute {
                        LinkAttribute::Controller(master) if *master != 0 => port.master = Some(*master),
                        LinkAttribute::AfSpecBridge(entries) => port.vlans = parse_vlans(entries),
                        _ => {}
                    }
                }
                port
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(vid: u16, flags: BridgeVlanInfoFlags) -> AfSpecBridge {
        AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid })
    }

    #[test]
    fn compressed_dump_entries_fold_into_runs() {
        let entries = [
            AfSpecBridge::Flags(BridgeFlag::Controller),
            info(10, BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged),
            info(20, BridgeVlanInfoFlags::RangeBegin),
            info(29, BridgeVlanInfoFlags::RangeEnd),
            info(40, BridgeVlanInfoFlags::empty()),
        ];
        assert_eq!(
            parse_vlans(&entries),
            [BridgeVlan::access(10), BridgeVlan::tagged_range(20, 29), BridgeVlan::tagged(40)]
        );
    }

    #[test]
    fn ranges_are_sent_as_begin_and_end() {
        let message = bridge_link_message(VlanTarget::Port(7), &[BridgeVlan::tagged_range(5, 9)]);
        assert_eq!(message.header.index, 7);
        assert_eq!(message.header.interface_family, AddressFamily::Bridge);
        let LinkAttribute::AfSpecBridge(spec) = &message.attributes[0] else { panic!("{message:?}") };
        assert_eq!(spec, &[info(5, BridgeVlanInfoFlags::RangeBegin), info(9, BridgeVlanInfoFlags::RangeEnd)]);
        let on_self = bridge_link_message(VlanTarget::Bridge(3), &[BridgeVlan::tagged(100)]);
        let LinkAttribute::AfSpecBridge(spec) = &on_self.attributes[0] else { panic!("{on_self:?}") };
        assert_eq!(
            spec,
            &[AfSpecBridge::Flags(BridgeFlag::LowerDev), info(100, BridgeVlanInfoFlags::empty())]
        );
    }

    #[test]
    fn bad_ids_are_refused_before_sending() {
        for bad in [BridgeVlan::tagged(0), BridgeVlan::tagged(4095), BridgeVlan::tagged_range(9, 5)] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let pvid_range = BridgeVlan { pvid: true, ..BridgeVlan::tagged_range(1, 2) };
        assert!(pvid_range.validate().is_err());
        BridgeVlan::access(4094).validate().unwrap();
    }
}
