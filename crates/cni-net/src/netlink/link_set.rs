//! Changing existing links: state, MTU, MAC, name, namespace, master, bridge-port options.
//!
//! Changes are sent as `RTM_NEWLINK` without `NLM_F_CREATE` on an existing index: the kernel
//! treats that like `RTM_SETLINK`, and it is the only form that also applies bridge-port
//! ("slave") options from `IFLA_LINKINFO`.

use std::os::fd::AsRawFd;

use netlink_packet_route::link::{
    InfoBridgePort, InfoPortData, InfoPortKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{link_message, validate_link_name, LinkRef};
use super::{context, Netlink};
use crate::error::Result;
use crate::mac::MacAddr;
use crate::netns::NetNs;

impl Netlink {
    fn change_link(
        &mut self,
        index: u32,
        describe: impl FnOnce() -> String,
        edit: impl FnOnce(&mut LinkMessage),
    ) -> Result<()> {
        let mut message = link_message(LinkRef::Index(index));
        edit(&mut message);
        context(self.request(RouteNetlinkMessage::NewLink(message), 0), || {
            format!("{} on link #{index}", describe())
        })
    }

    fn change_flag(&mut self, index: u32, flag: LinkFlags, on: bool, what: &str) -> Result<()> {
        self.change_link(
            index,
            || format!("set {what} {}", if on { "on" } else { "off" }),
            |message| {
                message.header.change_mask = flag;
                if on {
                    message.header.flags = flag;
                }
            },
        )
    }

    /// Brings a link administratively up.
    pub fn set_link_up(&mut self, index: u32) -> Result<()> {
        self.change_flag(index, LinkFlags::Up, true, "up")
    }

    /// Brings a link administratively down.
    pub fn set_link_down(&mut self, index: u32) -> Result<()> {
        self.change_flag(index, LinkFlags::Up, false, "up")
    }

    /// Turns promiscuous mode on or off.
    pub fn set_link_promisc(&mut self, index: u32, on: bool) -> Result<()> {
        self.change_flag(index, LinkFlags::Promisc, on, "promisc")
    }

    /// Turns all-multicast mode on or off.
    pub fn set_link_allmulti(&mut self, index: u32, on: bool) -> Result<()> {
        self.change_flag(index, LinkFlags::Allmulti, on, "allmulti")
    }

    /// Sets the MTU.
    pub fn set_link_mtu(&mut self, index: u32, mtu: u32) -> Result<()> {
        self.change_link(
            index,
            || format!("set mtu {mtu}"),
            |message| message.attributes.push(LinkAttribute::Mtu(mtu)),
        )
    }

    /// Sets the hardware address.
    pub fn set_link_mac(&mut self, index: u32, mac: MacAddr) -> Result<()> {
        self.change_link(
            index,
            || format!("set mac {mac}"),
            |message| message.attributes.push(LinkAttribute::Address(mac.0.to_vec())),
        )
    }

    /// Renames a link (it must be down).
    pub fn set_link_name(&mut self, index: u32, name: &str) -> Result<()> {
        validate_link_name(name)?;
        self.change_link(
            index,
            || format!("rename to {name}"),
            |message| message.attributes.push(LinkAttribute::IfName(name.to_string())),
        )
    }

    /// Sets the alias (`ifalias`); an empty string clears it.
    pub fn set_link_alias(&mut self, index: u32, alias: &str) -> Result<()> {
        self.change_link(
            index,
            || format!("set alias {alias:?}"),
            |message| message.attributes.push(LinkAttribute::IfAlias(alias.to_string())),
        )
    }

    /// Sets the alias and the group in one change, so a reader sees both old or both new
    /// (bandwidth labels its IFB this way: see [`super::LinkSpec::group`]).
    pub fn set_link_alias_and_group(&mut self, index: u32, alias: &str, group: u32) -> Result<()> {
        self.change_link(
            index,
            || format!("set alias {alias:?} and group {group}"),
            |message| {
                message.attributes.push(LinkAttribute::IfAlias(alias.to_string()));
                message.attributes.push(LinkAttribute::Group(group));
            },
        )
    }

    /// Sets the group.
    pub fn set_link_group(&mut self, index: u32, group: u32) -> Result<()> {
        self.change_link(
            index,
            || format!("set group {group}"),
            |message| message.attributes.push(LinkAttribute::Group(group)),
        )
    }

    /// Sets the transmit queue length.
    pub fn set_link_txqlen(&mut self, index: u32, txqlen: u32) -> Result<()> {
        self.change_link(
            index,
            || format!("set txqlen {txqlen}"),
            |message| message.attributes.push(LinkAttribute::TxQueueLen(txqlen)),
        )
    }

    /// Moves a link into another namespace. Slower (~10+ ms) than creating it there directly;
    /// prefer [`super::LinkSpec::netns`] when creating.
    pub fn set_link_netns(&mut self, index: u32, ns: &NetNs) -> Result<()> {
        let fd = ns.as_raw_fd();
        self.change_link(
            index,
            || format!("move to namespace {}", ns.path().display()),
            |message| message.attributes.push(LinkAttribute::NetNsFd(fd)),
        )
    }

    /// Enslaves a link to a master (bridge, bond, vrf).
    pub fn set_link_master(&mut self, index: u32, master_index: u32) -> Result<()> {
        self.change_link(
            index,
            || format!("set master #{master_index}"),
            |message| message.attributes.push(LinkAttribute::Controller(master_index)),
        )
    }

    /// Releases a link from its master.
    pub fn set_link_nomaster(&mut self, index: u32) -> Result<()> {
        self.change_link(
            index,
            || "set nomaster".to_string(),
            |message| message.attributes.push(LinkAttribute::Controller(0)),
        )
    }

    /// Bridge port: reflect frames back out of the port they came in on (hairpin mode).
    pub fn set_bridge_port_hairpin(&mut self, index: u32, on: bool) -> Result<()> {
        self.set_bridge_port(index, InfoBridgePort::HairpinMode(on), "hairpin", on)
    }

    /// Bridge port: isolated ports cannot talk to each other, only to non-isolated ones.
    pub fn set_bridge_port_isolated(&mut self, index: u32, on: bool) -> Result<()> {
        self.set_bridge_port(index, InfoBridgePort::Isolated(on), "isolated", on)
    }

    fn set_bridge_port(&mut self, index: u32, option: InfoBridgePort, what: &str, on: bool) -> Result<()> {
        self.change_link(
            index,
            || format!("set bridge port {what} {on}"),
            |message| {
                message.attributes.push(LinkAttribute::LinkInfo(vec![
                    LinkInfo::PortKind(InfoPortKind::Bridge),
                    LinkInfo::PortData(InfoPortData::BridgePort(vec![option])),
                ]))
            },
        )
    }
}
