//! A small synchronous rtnetlink layer.
//!
//! [`Netlink`] is one NETLINK_ROUTE socket. A socket is bound to the network namespace of
//! the thread that created it, for its whole life: [`Netlink::in_ns`] creates the socket
//! inside the target namespace (see [`crate::NetNs::run`]), after which the thread can
//! configure both sides (host and container) with two handles from its own namespace.
//!
//! Every change is a request with `NLM_F_ACK`, answered by exactly one `NLMSG_ERROR`; every
//! listing is a dump that is always read to its `NLMSG_DONE` and retried when the kernel marks
//! it `NLM_F_DUMP_INTR` (the table changed while it was being dumped, so it may be
//! inconsistent). Operations live in one module per object type.

mod addr;
mod bridge_vlan;
pub(crate) mod codec;
mod dummy;
mod events;
mod fdb;
mod ifb;
mod ipvlan;
mod link;
mod link_create;
mod link_move;
mod link_set;
mod macvlan;
mod neigh;
mod route;
mod rule;
pub mod tc;
mod tun;
mod vlan;
mod vrf;
mod wireguard;

pub use addr::{parse_ipnet, AddressFlags, IpAddress, IpFamily};
pub use bridge_vlan::{BridgeVlan, BridgeVlanSettings, PortVlans, VlanTarget};
pub use events::LinkCondition;
pub use fdb::FdbEntry;
pub use ipvlan::IpvlanMode;
pub use link::{BridgePort, Link, LinkKind};
pub use link_create::{BridgeOptions, LinkSpec, MacvlanMode, VethSpec, VxlanSpec};
pub use macvlan::MacvlanSpec;
pub use neigh::{Neighbour, NeighbourState};
pub use route::{NextHop, Route, RouteProtocol, RouteScope, RouteType, MAIN_TABLE};
pub use rule::Rule;
pub use tun::{attach_tun, create_tun, TunSpec, TunType};
pub use vlan::MAX_VLAN_ID;
pub use vrf::Vrf;
pub use wireguard::WIREGUARD_KIND;

use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::{Error, NetlinkError, Result};
use crate::netns::NetNs;
use crate::transport::{Conversation, Socket, Transport};
pub(crate) use codec::decode_message;
use codec::encode_request;

/// `NETLINK_ROUTE` from <linux/netlink.h>.
const NETLINK_ROUTE: i32 = 0;
/// Receive buffer: big dumps (many routes) arrive in several datagrams, and notifications
/// may pile up while a waiter is busy (ENOBUFS otherwise).
const RECV_BUFFER_BYTES: usize = 1 << 20;

/// One NETLINK_ROUTE socket, bound to one network namespace.
pub struct Netlink {
    conversation: Conversation<Box<dyn Transport>>,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("fd", &self.conversation.transport.fd().map(|fd| fd.as_raw_fd()))
            .finish()
    }
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn new() -> Result<Netlink> {
        let open = || -> std::io::Result<Socket> {
            let socket = Socket::open(NETLINK_ROUTE)?;
            socket.set_strict_checking()?;
            let _ = socket.set_recv_buffer(RECV_BUFFER_BYTES);
            Ok(socket)
        };
        let socket = open().map_err(|err| Error::netlink("open netlink socket", err.into()))?;
        Ok(Netlink::with_transport(Box::new(socket)))
    }

    /// Opens a socket that lives in `ns`. It stays bound to `ns`, so it can be used from any
    /// thread afterwards.
    pub fn in_ns(ns: &NetNs) -> Result<Netlink> {
        ns.run(Netlink::new)?
    }

    fn with_transport(transport: Box<dyn Transport>) -> Netlink {
        Netlink { conversation: Conversation::new(transport) }
    }

    pub(crate) fn next_sequence(&mut self) -> u32 {
        self.conversation.next_sequence()
    }

    /// Sends `message` with `NLM_F_REQUEST | NLM_F_ACK | flags` and waits for its ack.
    pub(crate) fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<(), NetlinkError> {
        self.conversation
            .request(
                |sequence| encode_request(message, NLM_F_REQUEST | NLM_F_ACK | flags, sequence),
                |_| Ok(()),
            )
            .map(drop)
    }

    /// Sends `message` with `NLM_F_REQUEST | NLM_F_ACK | flags` and returns the messages the
    /// kernel answered before its ack (a GET by name answers one message).
    pub(crate) fn exchange(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.conversation.request(
            |sequence| encode_request(message, NLM_F_REQUEST | NLM_F_ACK | flags, sequence),
            decode_message,
        )
    }

    /// Runs a dump for `message` and returns every reply message, retrying the whole dump
    /// when the kernel marks it interrupted.
    pub(crate) fn dump(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.conversation.dump(
            |sequence| encode_request(message.clone(), NLM_F_REQUEST | NLM_F_DUMP, sequence),
            |reply| decode_message(reply).map(Some),
        )
    }
}

#[cfg(test)]
mod tests;

/// Attaches the operation context to a netlink failure.
pub(crate) fn context<T>(
    result: std::result::Result<T, NetlinkError>,
    op: impl FnOnce() -> String,
) -> Result<T> {
    result.map_err(|source| Error::netlink(op(), source))
}
