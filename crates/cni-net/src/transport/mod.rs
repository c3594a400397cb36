//! The netlink transport, below any protocol: the one socket type ([`socket::Socket`]),
//! reading the kernel's datagrams ([`message`]) and the request/dump/batch loop
//! ([`conversation`]) that rtnetlink ([`crate::netlink`]), nf_tables and ctnetlink
//! ([`crate::nft`]) and WireGuard's generic netlink ([`crate::wireguard`]) all use.

pub(crate) mod conversation;
pub(crate) mod message;
pub(crate) mod socket;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub(crate) use conversation::{BatchError, Conversation, Transport};
pub(crate) use message::Message;
pub(crate) use socket::{Socket, Wait};
