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
mod codec;
mod dummy;
mod events;
mod ifb;
mod ipvlan;
mod link;
mod link_create;
mod link_set;
mod neigh;
mod route;
mod rule;
pub mod tc;
mod transport;
mod tun;
mod vlan;

pub use addr::{parse_ipnet, AddressFlags, IpAddress, IpFamily};
pub use events::LinkCondition;
pub use ipvlan::IpvlanMode;
pub use link::{BridgePort, Link, LinkKind};
pub use link_create::{BridgeOptions, LinkSpec, MacvlanMode, VethSpec, VxlanSpec};
pub use neigh::{Neighbour, NeighbourState};
pub use route::{NextHop, Route, RouteProtocol, RouteScope, RouteType, MAIN_TABLE};
pub use rule::Rule;
pub use tun::{create_tun, TunSpec, TunType};
pub use vlan::MAX_VLAN_ID;

use std::time::Duration;

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::{Error, NetlinkError, Result};
use crate::netns::NetNs;
use codec::{decode_datagram, encode_request, ReplyPayload};
use transport::{KernelSocket, Transport};

/// How often a dump interrupted by concurrent changes is retried before giving up.
const MAX_DUMP_ATTEMPTS: u32 = 10;

/// One NETLINK_ROUTE socket, bound to one network namespace.
pub struct Netlink {
    transport: Box<dyn Transport>,
    sequence: u32,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink").field("port_id", &self.transport.port_id()).finish()
    }
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn new() -> Result<Netlink> {
        let socket = KernelSocket::open().map_err(|err| Error::netlink("open netlink socket", err.into()))?;
        Ok(Netlink::with_transport(Box::new(socket)))
    }

    /// Opens a socket that lives in `ns`. It stays bound to `ns`, so it can be used from any
    /// thread afterwards.
    pub fn in_ns(ns: &NetNs) -> Result<Netlink> {
        ns.run(Netlink::new)?
    }

    fn with_transport(transport: Box<dyn Transport>) -> Netlink {
        Netlink {
            transport,
            // Start somewhere other than 0/1 so stray replies to other sockets never match.
            sequence: std::process::id().wrapping_mul(7919),
        }
    }

    pub(crate) fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Sends `message` with `NLM_F_REQUEST | NLM_F_ACK | flags` and waits for its ack.
    pub(crate) fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<(), NetlinkError> {
        self.exchange(message, flags).map(drop)
    }

    /// Sends `message` with `NLM_F_REQUEST | NLM_F_ACK | flags` and returns the messages the
    /// kernel answered before its ack (a GET by name answers one message).
    pub(crate) fn exchange(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let sequence = self.next_sequence();
        let bytes = encode_request(message, NLM_F_REQUEST | NLM_F_ACK | flags, sequence);
        self.transport.send(&bytes)?;
        let mut answers = Vec::new();
        loop {
            let datagram = self.receive(None)?;
            for reply in decode_datagram(&datagram)? {
                if reply.sequence != sequence {
                    continue; // a late reply to an earlier request, or an event
                }
                match reply.payload {
                    ReplyPayload::Ack => return Ok(answers),
                    ReplyPayload::Error(error) => return Err(error),
                    ReplyPayload::Message(message) => answers.push(*message),
                    ReplyPayload::Undecodable(error) => return Err(error),
                    ReplyPayload::Done => continue,
                }
            }
        }
    }

    /// Runs a dump for `message` and returns every reply message, retrying the whole dump
    /// when the kernel marks it interrupted.
    pub(crate) fn dump(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> std::result::Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        for _ in 0..MAX_DUMP_ATTEMPTS {
            match self.dump_once(message.clone())? {
                DumpOutcome::Complete(messages) => return Ok(messages),
                DumpOutcome::Interrupted => continue,
            }
        }
        Err(NetlinkError::DumpInterrupted { attempts: MAX_DUMP_ATTEMPTS })
    }

    fn dump_once(&mut self, message: RouteNetlinkMessage) -> std::result::Result<DumpOutcome, NetlinkError> {
        let sequence = self.next_sequence();
        let bytes = encode_request(message, NLM_F_REQUEST | NLM_F_DUMP, sequence);
        self.transport.send(&bytes)?;
        let mut messages = Vec::new();
        let mut interrupted = false;
        // The first failure is remembered but the dump is still read to its end, so no
        // leftover datagrams confuse the next request on this socket.
        let mut failure: Option<NetlinkError> = None;
        loop {
            let datagram = self.receive(None)?;
            let replies = match decode_datagram(&datagram) {
                Ok(replies) => replies,
                Err(err) => {
                    failure.get_or_insert(err);
                    continue;
                }
            };
            for reply in replies {
                if reply.sequence != sequence {
                    continue;
                }
                interrupted |= reply.interrupted;
                match reply.payload {
                    ReplyPayload::Message(message) => messages.push(*message),
                    ReplyPayload::Undecodable(err) => {
                        failure.get_or_insert(err);
                    }
                    ReplyPayload::Done => {
                        if let Some(err) = failure {
                            return Err(err);
                        }
                        return Ok(if interrupted {
                            DumpOutcome::Interrupted
                        } else {
                            DumpOutcome::Complete(messages)
                        });
                    }
                    // An error ends a dump (it is its last message).
                    ReplyPayload::Error(err) => return Err(failure.unwrap_or(err)),
                    ReplyPayload::Ack => return Err(NetlinkError::Unexpected("ack in a dump".into())),
                }
            }
        }
    }

    fn receive(&mut self, timeout: Option<Duration>) -> std::result::Result<Vec<u8>, NetlinkError> {
        match self.transport.recv(timeout)? {
            Some(datagram) => Ok(datagram),
            None => Err(NetlinkError::Io(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

enum DumpOutcome {
    Complete(Vec<RouteNetlinkMessage>),
    Interrupted,
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
