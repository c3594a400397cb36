//! cni-net: the host-networking toolkit every cni-rs plugin shares.
//!
//! Network namespaces, a small synchronous netlink layer, sysctl access and nftables over
//! nfnetlink. Nothing here spawns `ip`, `tc`, `sysctl` or `nft`.

pub mod nft;
