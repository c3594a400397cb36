//! cni-net: the host-networking toolkit every cni-rs plugin shares.
//!
//! Network namespaces, a small synchronous netlink layer, sysctl access and nftables over
//! nfnetlink. Nothing here spawns `ip`, `tc`, `sysctl` or `nft`.
//!
//! The usual shape of an interface plugin's ADD, all from the plugin's own thread:
//!
//! ```no_run
//! use cni_net::netlink::{AddressFlags, IpFamily, LinkSpec, Route, VethSpec};
//! use cni_net::{NetNs, Netlink};
//!
//! # fn main() -> cni_net::Result<()> {
//! let container = NetNs::open("/run/netns/example")?;
//! let mut host = Netlink::new()?;
//! let mut inside = Netlink::in_ns(&container)?; // socket bound to the container's namespace
//! // The container end is created directly in the container (no costly move).
//! let host_end = host
//!     .add_veth(&VethSpec {
//!         link: LinkSpec::new("veth1234"),
//!         peer: LinkSpec::new("eth0").mtu(1500).netns(&container),
//!     })?
//!     .expect("host end is local");
//! host.set_link_up(host_end.index)?;
//! let eth0 = inside.require_link("eth0")?;
//! inside.add_address(eth0.index, "10.88.0.2/16".parse().unwrap(), AddressFlags::empty())?;
//! inside.set_link_up(eth0.index)?;
//! inside.add_route(&Route::default_route(IpFamily::V4).gateway("10.88.0.1".parse().unwrap()))?;
//! cni_net::sysctl::disable_ipv6_dad(&container, "eth0")?;
//! # Ok(())
//! # }
//! ```

pub mod announce;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod idempotent;
pub mod mac;
// rtnetlink (NETLINK_ROUTE): links, addresses, routes, neighbours, rules, tc.
pub mod netlink;
pub mod netns;
// nf_tables and conntrack (NETLINK_NETFILTER).
pub mod nft;
// Netlink itself, below these and `wireguard` (generic netlink): the one socket type
// and the request/dump/batch loop they all use.
pub mod sysctl;
mod transport;
pub mod wireguard;

pub use cni_os::idempotent::Idempotent;
pub use error::{Error, NetlinkError, Result};
pub use mac::MacAddr;
pub use netlink::{Link, Netlink};
pub use netns::NetNs;
