//! Creating links: veth pairs, bridges, macvlans, vxlans.
//!
//! Every creation uses `NLM_F_CREATE | NLM_F_EXCL`, so an existing name fails with `EEXIST`
//! (see [`crate::Error::is_already_exists`]) instead of silently reusing another device.

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoKind, InfoVeth, InfoVxlan, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::validate_link_name;
use super::{context, Link, Netlink};
use crate::error::{Error, Result};
use crate::mac::MacAddr;
use crate::netns::NetNs;

/// Common properties of a link to create.
#[derive(Debug, Clone)]
pub struct LinkSpec<'a> {
    pub name: String,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub txqlen: Option<u32>,
    /// The link's group (`IFLA_GROUP`), one of the few properties the kernel takes at
    /// creation: a mark that exists from the link's first moment.
    pub group: Option<u32>,
    /// Create the link directly in this namespace instead of the socket's (much cheaper
    /// than creating and then moving it).
    pub netns: Option<&'a NetNs>,
}

impl<'a> LinkSpec<'a> {
    /// A spec with just a name.
    pub fn new(name: impl Into<String>) -> LinkSpec<'a> {
        LinkSpec { name: name.into(), mtu: None, mac: None, txqlen: None, group: None, netns: None }
    }

    /// Sets the MTU.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Sets the MAC address.
    pub fn mac(mut self, mac: MacAddr) -> Self {
        self.mac = Some(mac);
        self
    }

    /// Sets the transmit queue length.
    pub fn txqlen(mut self, txqlen: u32) -> Self {
        self.txqlen = Some(txqlen);
        self
    }

    /// Sets the group the link is created in.
    pub fn group(mut self, group: u32) -> Self {
        self.group = Some(group);
        self
    }

    /// Creates the link in `ns`.
    pub fn netns(mut self, ns: &'a NetNs) -> Self {
        self.netns = Some(ns);
        self
    }

    pub(super) fn to_message(&self) -> Result<LinkMessage> {
        validate_link_name(&self.name)?;
        let mut message = LinkMessage::default();
        message.attributes.push(LinkAttribute::IfName(self.name.clone()));
        if let Some(mtu) = self.mtu {
            message.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = self.mac {
            message.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
        }
        if let Some(txqlen) = self.txqlen {
            message.attributes.push(LinkAttribute::TxQueueLen(txqlen));
        }
        if let Some(group) = self.group {
            message.attributes.push(LinkAttribute::Group(group));
        }
        if let Some(ns) = self.netns {
            message.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        }
        Ok(message)
    }
}

/// A veth pair: `link` is created in the socket's namespace (or `link.netns`), `peer` in
/// `peer.netns` (typically the container's namespace).
#[derive(Debug, Clone)]
pub struct VethSpec<'a> {
    pub link: LinkSpec<'a>,
    pub peer: LinkSpec<'a>,
}

/// Bridge options.
#[derive(Debug, Clone, Default)]
pub struct BridgeOptions {
    /// Enable 802.1Q VLAN filtering on the bridge.
    pub vlan_filtering: Option<bool>,
    /// Default PVID for new ports when VLAN filtering is on.
    pub vlan_default_pvid: Option<u16>,
}

/// Macvlan modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    Private,
    Vepa,
    Bridge,
    Passthru,
}

impl std::str::FromStr for MacvlanMode {
    type Err = Error;

    fn from_str(text: &str) -> Result<MacvlanMode> {
        match text {
            "private" => Ok(MacvlanMode::Private),
            "vepa" => Ok(MacvlanMode::Vepa),
            "bridge" => Ok(MacvlanMode::Bridge),
            "passthru" => Ok(MacvlanMode::Passthru),
            other => Err(Error::InvalidArgument(format!("unknown macvlan mode {other:?}"))),
        }
    }
}

/// VXLAN device parameters.
#[derive(Debug, Clone, Default)]
pub struct VxlanSpec {
    pub vni: u32,
    /// UDP destination port (kernel default 8472 if unset; IANA is 4789).
    pub port: Option<u16>,
    pub local: Option<IpAddr>,
    /// Multicast group or unicast remote.
    pub group: Option<IpAddr>,
    /// Underlay device index.
    pub parent_index: Option<u32>,
    pub learning: Option<bool>,
}

impl Netlink {
    /// Creates a link of `kind`; the per-kind builders (here and in their own modules)
    /// add their `IFLA_INFO_DATA` and extra attributes.
    pub(super) fn create_link(
        &mut self,
        spec: &LinkSpec<'_>,
        kind: InfoKind,
        data: Option<InfoData>,
        extra: Vec<LinkAttribute>,
    ) -> Result<()> {
        let mut message = spec.to_message()?;
        message.attributes.extend(extra);
        let mut info = vec![LinkInfo::Kind(kind.clone())];
        info.extend(data.map(LinkInfo::Data));
        message.attributes.push(LinkAttribute::LinkInfo(info));
        context(self.request(RouteNetlinkMessage::NewLink(message), NLM_F_CREATE | NLM_F_EXCL), || {
            format!("create {kind} link {}", spec.name)
        })
    }

    /// Looks up a link this socket just created (unless it was created in another namespace,
    /// in which case `None` is returned).
    pub(super) fn created(&mut self, spec: &LinkSpec<'_>) -> Result<Option<Link>> {
        if spec.netns.is_some() {
            return Ok(None);
        }
        self.require_link(&spec.name).map(Some)
    }

    /// Creates a veth pair; returns the `link` end when it is in this socket's namespace.
    pub fn add_veth(&mut self, spec: &VethSpec<'_>) -> Result<Option<Link>> {
        let peer = spec.peer.to_message()?;
        self.create_link(&spec.link, InfoKind::Veth, Some(InfoData::Veth(InfoVeth::Peer(peer))), Vec::new())?;
        self.created(&spec.link)
    }

    /// Creates a bridge.
    pub fn add_bridge(&mut self, spec: &LinkSpec<'_>, options: &BridgeOptions) -> Result<Option<Link>> {
        let mut data = Vec::new();
        if let Some(on) = options.vlan_filtering {
            data.push(InfoBridge::VlanFiltering(on));
        }
        if let Some(pvid) = options.vlan_default_pvid {
            data.push(InfoBridge::VlanDefaultPvid(pvid));
        }
        let data = (!data.is_empty()).then_some(InfoData::Bridge(data));
        self.create_link(spec, InfoKind::Bridge, data, Vec::new())?;
        self.created(spec)
    }

    /// Creates a VXLAN device.
    pub fn add_vxlan(&mut self, spec: &LinkSpec<'_>, vxlan: &VxlanSpec) -> Result<Option<Link>> {
        let mut data = vec![InfoVxlan::Id(vxlan.vni)];
        if let Some(port) = vxlan.port {
            data.push(InfoVxlan::Port(port));
        }
        match vxlan.local {
            Some(IpAddr::V4(addr)) => data.push(InfoVxlan::Local(addr)),
            Some(IpAddr::V6(addr)) => data.push(InfoVxlan::Local6(addr)),
            None => {}
        }
        match vxlan.group {
            Some(IpAddr::V4(addr)) => data.push(InfoVxlan::Group(addr)),
            Some(IpAddr::V6(addr)) => data.push(InfoVxlan::Group6(addr)),
            None => {}
        }
        if let Some(parent) = vxlan.parent_index {
            data.push(InfoVxlan::Link(parent));
        }
        if let Some(learning) = vxlan.learning {
            data.push(InfoVxlan::Learning(learning));
        }
        self.create_link(spec, InfoKind::Vxlan, Some(InfoData::Vxlan(data)), Vec::new())?;
        self.created(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macvlan_modes_parse() {
        assert_eq!("bridge".parse::<MacvlanMode>().unwrap(), MacvlanMode::Bridge);
        assert_eq!("passthru".parse::<MacvlanMode>().unwrap(), MacvlanMode::Passthru);
        assert!("l2".parse::<MacvlanMode>().is_err());
    }

    #[test]
    fn spec_rejects_bad_names() {
        assert!(LinkSpec::new("way-too-long-name0").to_message().is_err());
        let message = LinkSpec::new("cntv0").mtu(1400).to_message().unwrap();
        assert!(message.attributes.contains(&LinkAttribute::Mtu(1400)));
    }
}
