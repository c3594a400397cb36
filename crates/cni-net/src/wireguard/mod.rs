//! The kernel's WireGuard devices, configured over their generic-netlink family
//! (`linux/wireguard.h`), as `wg(8)` does but without it.
//!
//! [`WireGuard`] is one `NETLINK_GENERIC` socket with the family's id, resolved by name
//! through `nlctrl` when it opens. Like [`crate::Netlink`], the socket belongs to the
//! namespace it was opened in ([`WireGuard::in_ns`]). The device itself is an rtnetlink
//! link ([`crate::Netlink::add_wireguard`]); this module sets its key, port and peers and
//! reads them back. Encoding and decoding are in [`wire`], pinned by golden-byte tests.
//!
//! The messages are `netlink-packet-wireguard`'s types, in `netlink-packet-generic`'s
//! header and the `nlctrl` lookup's types, serialised by `netlink-packet-core` (the version
//! rtnetlink's codecs use); only the socket and the request/dump loop are this crate's own
//! ([`crate::transport`]). [`wire`] builds the requests (pinned by golden-byte tests against
//! `linux/wireguard.h`) and reads the answers, parsing only the attributes it keeps and
//! checking first the one bound the crate's parser misses (an empty CIDR mask panics it).
//! Nothing of this module is linked into the `cni-plugins` binary (only cni-overlay uses
//! it), so its size budget is not at stake.

mod wire;

pub use wire::{base64, parse_key, MAX_ALLOWED_IPS_PER_PEER};

use std::net::SocketAddr;

use ipnet::IpNet;

use crate::error::{Error, NetlinkError, Result};
use crate::netns::NetNs;
use crate::transport::{Conversation, Socket};

/// A Curve25519 key (private or public), as the kernel takes and reports it.
pub type Key = [u8; KEY_LEN];

/// The length of every WireGuard key.
pub const KEY_LEN: usize = 32;

/// `NETLINK_GENERIC` from <linux/netlink.h>.
const NETLINK_GENERIC: i32 = 16;

/// Turns 32 random bytes into a Curve25519 private key (RFC 7748's clamping, as `wg genkey`
/// does): the kernel would clamp it anyway, but the key kept on disk is then the one in use.
pub fn clamp(mut key: Key) -> Key {
    key[0] &= 248;
    key[31] &= 127;
    key[31] |= 64;
    key
}

/// One peer of a device: what is set, and what a dump reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgPeer {
    pub public_key: Key,
    /// Where its packets go (and, until it roams, come from).
    pub endpoint: Option<SocketAddr>,
    /// The inner addresses it may send from and that are sent to it.
    pub allowed_ips: Vec<IpNet>,
}

/// A device as the kernel reports it (never its private key: not asked for, not kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WgDevice {
    /// The public key of the private key set, if one is.
    pub public_key: Option<Key>,
    pub listen_port: u16,
    pub peers: Vec<WgPeer>,
}

/// One generic-netlink socket speaking the `wireguard` family.
pub struct WireGuard {
    conversation: Conversation<Socket>,
    family: u16,
}

impl std::fmt::Debug for WireGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireGuard").field("family", &self.family).finish()
    }
}

fn failed(op: impl Into<String>) -> impl FnOnce(NetlinkError) -> Error {
    let op = op.into();
    move |source| Error::netlink(op, source)
}

impl WireGuard {
    /// Opens a socket in the calling thread's namespace and resolves the family; fails
    /// (ENOENT from nlctrl) when the kernel has no WireGuard.
    pub fn new() -> Result<WireGuard> {
        let socket = Socket::open(NETLINK_GENERIC)
            .map_err(|e| Error::netlink("open generic netlink socket", e.into()))?;
        let mut conversation = Conversation::new(socket);
        let family = conversation
            .request(wire::get_family_request, wire::decode_family_id)
            .map_err(failed("resolve the wireguard generic-netlink family"))?
            .into_iter()
            .next()
            .ok_or_else(|| {
                failed("resolve the wireguard family")(NetlinkError::Unexpected("no answer".into()))
            })?;
        Ok(WireGuard { conversation, family })
    }

    /// Opens a socket that lives in `ns` (usable from any thread afterwards).
    pub fn in_ns(ns: &NetNs) -> Result<WireGuard> {
        ns.run(WireGuard::new)?
    }

    /// The device `index` as the kernel holds it: public key, port, peers (a dump: the
    /// kernel splits a device with many peers over several messages, merged here).
    pub fn device(&mut self, index: u32) -> Result<WgDevice> {
        let family = self.family;
        let parts = self
            .conversation
            .dump(
                |sequence| wire::get_device_request(family, sequence, index),
                |m| wire::decode_device(m).map(Some),
            )
            .map_err(failed(format!("read wireguard device {index}")))?;
        Ok(wire::merge(parts))
    }

    /// Sets the device's private key and listen port; its peers are left as they are.
    pub fn set_device(&mut self, index: u32, private_key: &Key, listen_port: u16) -> Result<()> {
        let family = self.family;
        self.set(
            |sequence| wire::set_device_request(family, sequence, index, private_key, listen_port),
            || format!("set key and port of wireguard device {index}"),
        )
    }

    /// Adds the peer, or updates the one with its key: endpoint set, allowed IPs replaced.
    /// Its session survives an update that changes nothing.
    pub fn set_peer(&mut self, index: u32, peer: &WgPeer) -> Result<()> {
        let op = || format!("set peer {} on wireguard device {index}", base64(&peer.public_key));
        wire::check_peer_size(peer).map_err(|refused| Error::netlink(op(), refused))?;
        let family = self.family;
        self.set(|sequence| wire::set_peer_request(family, sequence, index, peer), op)
    }

    /// Removes the peer with this key (and its allowed IPs); nothing when there is none.
    pub fn remove_peer(&mut self, index: u32, public_key: &Key) -> Result<()> {
        let family = self.family;
        self.set(
            |sequence| wire::remove_peer_request(family, sequence, index, public_key),
            || format!("remove peer {} from wireguard device {index}", base64(public_key)),
        )
    }

    /// One `WG_CMD_SET_DEVICE` request, acknowledged; `op` names it in the error.
    fn set(&mut self, build: impl FnOnce(u32) -> Vec<u8>, op: impl FnOnce() -> String) -> Result<()> {
        self.conversation.request(build, |_| Ok(())).map(drop).map_err(|source| Error::netlink(op(), source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamping_follows_rfc_7748() {
        let key = clamp([0xff; KEY_LEN]);
        assert_eq!((key[0], key[31]), (0xf8, 0x7f));
        let key = clamp([0; KEY_LEN]);
        assert_eq!((key[0], key[31]), (0, 0x40));
        assert_eq!(&key[1..31], &[0; 30]);
    }
}
