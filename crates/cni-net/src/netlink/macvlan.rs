//! Macvlan links: creation (mode, parent, broadcast queue length) and reading a macvlan's
//! mode back (for CHECK), which [`super::Link`] does not carry.

use netlink_packet_route::link::{InfoData, InfoKind, InfoMacVlan, LinkAttribute, LinkInfo, MacVlanMode};
use netlink_packet_route::RouteNetlinkMessage;

use super::{context, Link, LinkSpec, MacvlanMode, Netlink};
use crate::error::Result;

/// A macvlan to create on top of `parent_index` (a device in the socket's namespace).
#[derive(Debug, Clone)]
pub struct MacvlanSpec<'a> {
    pub link: LinkSpec<'a>,
    pub parent_index: u32,
    pub mode: MacvlanMode,
    /// `IFLA_MACVLAN_BC_QUEUE_LEN`: how many broadcast/multicast frames are queued for
    /// delivery to the macvlans of one parent (kernel default 1000).
    pub bc_queue_len: Option<u32>,
}

fn to_kernel(mode: MacvlanMode) -> MacVlanMode {
    match mode {
        MacvlanMode::Private => MacVlanMode::Private,
        MacvlanMode::Vepa => MacVlanMode::Vepa,
        MacvlanMode::Bridge => MacVlanMode::Bridge,
        MacvlanMode::Passthru => MacVlanMode::Passthrough,
    }
}

fn from_kernel(mode: &MacVlanMode) -> Option<MacvlanMode> {
    match mode {
        MacVlanMode::Private => Some(MacvlanMode::Private),
        MacVlanMode::Vepa => Some(MacvlanMode::Vepa),
        MacVlanMode::Bridge => Some(MacvlanMode::Bridge),
        MacVlanMode::Passthrough => Some(MacvlanMode::Passthru),
        _ => None,
    }
}

impl std::fmt::Display for MacvlanMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MacvlanMode::Private => "private",
            MacvlanMode::Vepa => "vepa",
            MacvlanMode::Bridge => "bridge",
            MacvlanMode::Passthru => "passthru",
        })
    }
}

fn macvlan_message(spec: &MacvlanSpec<'_>) -> Result<netlink_packet_route::link::LinkMessage> {
    let mut message = spec.link.to_message()?;
    message.attributes.push(LinkAttribute::Link(spec.parent_index));
    let mut data = vec![InfoMacVlan::Mode(to_kernel(spec.mode))];
    if let Some(len) = spec.bc_queue_len {
        data.push(InfoMacVlan::BcQueueLen(len));
    }
    message.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::MacVlan),
        LinkInfo::Data(InfoData::MacVlan(data)),
    ]));
    Ok(message)
}

impl Netlink {
    /// Creates a macvlan; returns it when it is in this socket's namespace. With
    /// `link.netns` set it is created straight in that namespace (its parent stays here).
    pub fn add_macvlan(&mut self, spec: &MacvlanSpec<'_>) -> Result<Option<Link>> {
        let message = macvlan_message(spec)?;
        context(
            self.request(
                RouteNetlinkMessage::NewLink(message),
                netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL,
            ),
            || format!("create macvlan link {}", spec.link.name),
        )?;
        if spec.link.netns.is_some() {
            return Ok(None);
        }
        self.require_link(&spec.link.name).map(Some)
    }

    /// The mode of macvlan `index`; `None` when it is not a macvlan (or gone).
    pub fn macvlan_mode(&mut self, index: u32) -> Result<Option<MacvlanMode>> {
        Ok(match self.link_info_data(index)? {
            Some(InfoData::MacVlan(data)) => data.iter().find_map(|d| match d {
                InfoMacVlan::Mode(mode) => from_kernel(mode),
                _ => None,
            }),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_carries_parent_mode_and_queue_length() {
        let spec = MacvlanSpec {
            link: LinkSpec::new("cnimv0").mtu(1400),
            parent_index: 4,
            mode: MacvlanMode::Private,
            bc_queue_len: Some(100),
        };
        let message = macvlan_message(&spec).unwrap();
        assert!(message.attributes.contains(&LinkAttribute::Link(4)));
        assert!(message.attributes.contains(&LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![
                InfoMacVlan::Mode(MacVlanMode::Private),
                InfoMacVlan::BcQueueLen(100)
            ]))
        ])));
        assert_eq!(MacvlanMode::Passthru.to_string(), "passthru");
    }
}
