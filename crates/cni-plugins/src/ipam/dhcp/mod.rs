//! `dhcp` IPAM: addresses leased from DHCPv4 and DHCPv6 servers by a long-running daemon.
//!
//! A plugin process lives for milliseconds, a lease for hours: so, as in the reference,
//! `cni-plugins dhcp daemon` holds the leases (acquires them inside the container's
//! namespace, renews at T1, rebinds at T2, releases on DEL, persists them so a restart
//! resumes renewing), and the `dhcp` plugin only asks it over a unix socket.
//!
//! - [`wire`], [`options`]: the DHCPv4 message and option codecs; [`wire6`]: DHCPv6's;
//! - [`lease`]: what an ACK grants and the CNI result made from it; [`lease6`]: a REPLY;
//! - [`client`], [`client6`]: the exchanges with a server, from a socket inside the
//!   container;
//! - [`store`]: leases on disk; [`daemon`]: keeping them; [`cli`]: the daemon's flags;
//!   [`metrics`]: what the daemon counts;
//! - [`protocol`]: plugin <-> daemon messages; [`plugin`]: the IPAM plugin itself.

pub mod cli;
pub mod client;
pub mod client6;
pub mod daemon;
pub mod lease;
pub mod lease6;
pub mod metrics;
pub mod options;
pub mod plugin;
pub mod protocol;
mod sockopt;
pub mod store;
pub mod wire;
pub mod wire6;
