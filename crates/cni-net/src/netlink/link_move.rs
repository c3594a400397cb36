//! Moving an existing link to another namespace and naming it there, in one request.
//!
//! The kernel applies a namespace change before a new name in the same `RTM_NEWLINK`, and
//! uses that name as the fallback when the link's current name is taken in the target:
//! so a host device called `eth1` can become the container's `eth0` even if the container
//! already has an `eth1`, and a container's `eth0` can go back to the host as `eth1`
//! while the host has an `eth0` of its own. The move takes the link down.

use std::os::fd::AsRawFd;

use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{link_message, validate_link_name, LinkRef};
use super::{context, Netlink};
use crate::error::Result;
use crate::netns::NetNs;

impl Netlink {
    /// Moves link `index` (in this socket's namespace) into `ns`, renaming it to `name`
    /// and, if given, setting its alias (an empty alias clears it).
    ///
    /// Not atomic in the kernel: if the rename fails (the name is taken in `ns`), the
    /// link has been moved under its old name; callers look for it there.
    pub fn move_link(&mut self, index: u32, ns: &NetNs, name: &str, alias: Option<&str>) -> Result<()> {
        validate_link_name(name)?;
        let mut message = link_message(LinkRef::Index(index));
        message.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        message.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(alias) = alias {
            message.attributes.push(LinkAttribute::IfAlias(alias.to_string()));
        }
        context(self.request(RouteNetlinkMessage::NewLink(message), 0), || {
            format!("move link #{index} to {} as {name}", ns.path().display())
        })
    }
}
