//! Waiting for link state changes through the kernel's link notifications (RTNLGRP_LINK),
//! instead of polling with sleeps.

use std::time::{Duration, Instant};

use netlink_packet_route::RouteNetlinkMessage;

use super::codec::decode_message;
use super::{Link, Netlink};
use crate::error::{Error, NetlinkError, Result};
use crate::transport::message::messages;
use crate::transport::Wait;

/// `RTNLGRP_LINK` from <linux/rtnetlink.h>.
const RTNLGRP_LINK: u32 = 1;

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkCondition {
    /// Administratively up (`IFF_UP`).
    Up,
    /// Up and with carrier (`IFF_LOWER_UP`).
    Carrier,
    /// Operationally up (`IFLA_OPERSTATE`): the kernel's link watcher has seen the carrier
    /// and given the device its real queueing discipline. Until then a packet sent on it
    /// goes to the placeholder qdisc, which drops it, although the carrier is already on.
    Running,
}

impl LinkCondition {
    fn holds(self, link: &Link) -> bool {
        match self {
            LinkCondition::Up => link.up,
            LinkCondition::Carrier => link.up && link.carrier,
            LinkCondition::Running => link.up && link.carrier && link.oper_up,
        }
    }
}

impl Netlink {
    /// Waits until link `index` satisfies `condition`, or `timeout` passes.
    ///
    /// Subscribes to link notifications first and only then reads the current state, so a
    /// change between the two is never missed.
    pub fn wait_for_link(&mut self, index: u32, condition: LinkCondition, timeout: Duration) -> Result<Link> {
        let op = || format!("wait for link #{index}");
        self.conversation
            .transport
            .join_group(RTNLGRP_LINK)
            .map_err(|err| Error::netlink(op(), err.into()))?;
        let outcome = self.wait_subscribed(index, condition, timeout);
        let _ = self.conversation.transport.leave_group(RTNLGRP_LINK);
        outcome
    }

    fn wait_subscribed(&mut self, index: u32, condition: LinkCondition, timeout: Duration) -> Result<Link> {
        let deadline = Instant::now() + timeout;
        let mut recheck = true;
        loop {
            if recheck {
                let link =
                    self.link_by_index(index)?.ok_or_else(|| Error::LinkNotFound(format!("#{index}")))?;
                if condition.holds(&link) {
                    return Ok(link);
                }
                recheck = false;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::Timeout { what: format!("link #{index} to be {condition:?}"), timeout });
            }
            let datagram = match self.conversation.transport.recv(Wait::For(remaining)) {
                Ok(Some(datagram)) => datagram,
                Ok(None) => continue,
                // Notifications overflowed the socket buffer: some were lost, ask directly.
                Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                    recheck = true;
                    continue;
                }
                Err(err) => {
                    return Err(Error::netlink(format!("wait for link #{index}"), NetlinkError::Io(err)))
                }
            };
            for message in messages(datagram) {
                let message =
                    message.map_err(|err| Error::netlink(format!("wait for link #{index}"), err))?;
                if message.status().is_some() {
                    continue; // a stray ack or end of dump, not a notification
                }
                match decode_message(message) {
                    Ok(RouteNetlinkMessage::NewLink(message)) if message.header.index == index => {
                        let link = Link::from_message(&message);
                        if condition.holds(&link) {
                            return Ok(link);
                        }
                    }
                    Ok(RouteNetlinkMessage::DelLink(message)) if message.header.index == index => {
                        return Err(Error::LinkNotFound(format!("#{index}")));
                    }
                    Ok(_) => {}
                    // Could not decode a notification: fall back to asking.
                    Err(_) => recheck = true,
                }
            }
        }
    }
}
