//! Intermediate functional block (IFB) devices: a packet redirected to one passes its
//! egress qdiscs and is then put back where it came from. Shaping traffic a device
//! *receives* is done by redirecting it through an IFB with a shaping root qdisc.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::{context, Link, LinkSpec, Netlink};
use crate::error::Result;

fn ifb_message(spec: &LinkSpec<'_>) -> Result<LinkMessage> {
    let mut message = spec.to_message()?;
    // Created up: an IFB that is down drops what is redirected to it.
    message.header.flags = LinkFlags::Up;
    message.header.change_mask = LinkFlags::Up;
    message.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
    Ok(message)
}

impl Netlink {
    /// Creates an IFB device, already up; returns it when it is in this socket's namespace.
    /// An existing name fails with `EEXIST`.
    pub fn add_ifb(&mut self, spec: &LinkSpec<'_>) -> Result<Option<Link>> {
        let message = ifb_message(spec)?;
        context(self.request(RouteNetlinkMessage::NewLink(message), NLM_F_CREATE | NLM_F_EXCL), || {
            format!("create ifb link {}", spec.name)
        })?;
        if spec.netns.is_some() {
            return Ok(None);
        }
        self.require_link(&spec.name).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifb_message_is_up_with_kind() {
        let message = ifb_message(&LinkSpec::new("bwp0123456789a").mtu(1400).txqlen(1000)).unwrap();
        assert!(message.header.flags.contains(LinkFlags::Up));
        assert!(message.attributes.contains(&LinkAttribute::Mtu(1400)));
        assert!(message.attributes.contains(&LinkAttribute::TxQueueLen(1000)));
        assert!(message.attributes.contains(&LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)])));
        assert!(ifb_message(&LinkSpec::new("much-too-long-ifb-name")).is_err());
        // The group is taken at creation (bandwidth marks an IFB it has not labelled yet).
        let grouped = ifb_message(&LinkSpec::new("bwp0123456789a").group(7)).unwrap();
        assert!(grouped.attributes.contains(&LinkAttribute::Group(7)));
    }
}
