//! The `NETLINK_NETFILTER` conversation nf_tables and ctnetlink clients hold: the shared
//! netlink socket and loop of [`crate::transport`], with buffers sized for batches.
//!
//! The socket belongs to the network namespace of the thread that created it, for its
//! whole life: to program another namespace, create the client while inside it (e.g. in
//! [`crate::NetNs::run`]), then use it from anywhere.

use std::os::fd::AsRawFd;

use super::error::NftError;
use super::sys::NETLINK_NETFILTER;
use crate::error::NetlinkError;
use crate::transport::{Conversation, Socket};

/// Default socket buffers: room for batches of a few thousand operations, their acks and
/// dump chunks. [`NetfilterConversation::make_room`] grows them for larger batches.
const BUFFER_BYTES: usize = 4 << 20;

/// A netfilter socket, its sequence numbers and the size its buffers were given.
pub(crate) struct NetfilterConversation {
    pub(crate) conversation: Conversation<Socket>,
    buffer_bytes: usize,
}

impl std::fmt::Debug for NetfilterConversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetfilterConversation").field("fd", &self.fd().as_raw_fd()).finish()
    }
}

impl NetfilterConversation {
    /// Opens a socket in the calling thread's current network namespace.
    pub(crate) fn open() -> Result<Self, NftError> {
        let socket = Socket::open(NETLINK_NETFILTER).map_err(NftError::Socket)?;
        socket.grow_buffers(BUFFER_BYTES).map_err(NftError::Socket)?;
        Ok(Self { conversation: Conversation::new(socket), buffer_bytes: BUFFER_BYTES })
    }

    /// The descriptor, for handing the socket's last reference elsewhere.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.conversation.transport.fd()
    }

    /// Makes both socket buffers hold at least `bytes` (a batch goes out in one send, and
    /// all its answers are queued before the first is read); no syscall if they do.
    pub(crate) fn make_room(&mut self, bytes: usize) -> Result<(), NftError> {
        if bytes > self.buffer_bytes {
            self.conversation.transport.grow_buffers(bytes).map_err(NftError::Socket)?;
            self.buffer_bytes = bytes;
        }
        Ok(())
    }
}

/// A decoder's failure, carried through the shared loop (which speaks [`NetlinkError`]) and
/// turned back into [`NftError::Malformed`] by [`NftError::from_netlink`].
pub(crate) fn decode_failure(error: NftError) -> NetlinkError {
    match error {
        NftError::Malformed(text) => NetlinkError::Decode(text),
        other => NetlinkError::Decode(other.to_string()),
    }
}
