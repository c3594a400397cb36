//! Traffic control over rtnetlink: queueing disciplines and filters, without the `tc` tool.
//!
//! What the bandwidth plugin needs, typed: a token bucket filter ([`TbfParams`]) as a root
//! qdisc, the `ingress`/`clsact` hook qdisc, and a match-all filter whose action is a
//! `mirred` egress redirect to another device (an IFB). Filters are `u32` with one
//! zero-mask key, which matches every packet and is available on every kernel (`matchall`
//! is a module that minimal kernels lack).
//!
//! Handles are `major:minor` packed in 32 bits, as the kernel has them ([`TcHandle`]).

mod filter;
mod qdisc;
mod tbf;

pub use filter::{RedirectFilter, TcFilter};
pub use qdisc::{Qdisc, QdiscKind, QdiscOptions, QdiscSpec};
pub use tbf::{TbfParams, PSCHED_TICKS_PER_USEC};

use std::fmt;

/// A qdisc, class or filter parent handle: `major:minor` in one `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcHandle(pub u32);

impl TcHandle {
    /// No handle: the kernel picks one (or "any" in lookups).
    pub const UNSPEC: TcHandle = TcHandle(0);
    /// The root of a device's egress tree (`TC_H_ROOT`).
    pub const ROOT: TcHandle = TcHandle(0xffff_ffff);
    /// Parent of the `ingress` and `clsact` qdiscs (`TC_H_INGRESS`, `ffff:fff1`).
    pub const INGRESS: TcHandle = TcHandle(0xffff_fff1);
    /// The handle an `ingress`/`clsact` qdisc always has (`ffff:`).
    pub const INGRESS_QDISC: TcHandle = TcHandle(0xffff_0000);
    /// Where filters for received packets attach, under both `ingress` and `clsact`
    /// (`ffff:fff2`, what `tc filter add ... ingress` uses).
    pub const INGRESS_HOOK: TcHandle = TcHandle(0xffff_fff2);

    /// `major:minor`.
    pub const fn new(major: u16, minor: u16) -> TcHandle {
        TcHandle(((major as u32) << 16) | minor as u32)
    }

    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }

    pub const fn minor(self) -> u16 {
        self.0 as u16
    }
}

impl fmt::Display for TcHandle {
    /// The way `tc` prints handles: `root`, `ingress`, `1:`, `ffff:fff2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TcHandle::ROOT => f.write_str("root"),
            TcHandle::INGRESS => f.write_str("ingress"),
            handle if handle.minor() == 0 => write!(f, "{:x}:", handle.major()),
            handle => write!(f, "{:x}:{:x}", handle.major(), handle.minor()),
        }
    }
}

impl From<netlink_packet_route::tc::TcHandle> for TcHandle {
    fn from(handle: netlink_packet_route::tc::TcHandle) -> TcHandle {
        TcHandle(handle.into())
    }
}

impl From<TcHandle> for netlink_packet_route::tc::TcHandle {
    fn from(handle: TcHandle) -> netlink_packet_route::tc::TcHandle {
        handle.0.into()
    }
}

/// `ETH_P_ALL`: a filter for every protocol.
pub const ETH_P_ALL: u16 = 0x0003;

/// Interface index as the tc header carries it (a signed int); indexes above `i32::MAX`
/// do not exist, so a failed conversion is a caller error.
fn header_index(index: u32) -> crate::Result<i32> {
    i32::try_from(index)
        .map_err(|_| crate::Error::InvalidArgument(format!("interface index {index} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_pack_and_print_like_tc() {
        assert_eq!(TcHandle::new(1, 0).0, 0x0001_0000);
        assert_eq!(TcHandle::new(0xffff, 0xfff1), TcHandle::INGRESS);
        assert_eq!(TcHandle::new(1, 0).to_string(), "1:");
        assert_eq!(TcHandle::new(0x8001, 0).to_string(), "8001:");
        assert_eq!(TcHandle::INGRESS_HOOK.to_string(), "ffff:fff2");
        assert_eq!(TcHandle::ROOT.to_string(), "root");
        assert_eq!(TcHandle::INGRESS_QDISC.major(), 0xffff);
        let converted: netlink_packet_route::tc::TcHandle = TcHandle::INGRESS.into();
        assert_eq!(converted, netlink_packet_route::tc::TcHandle::INGRESS);
        assert_eq!(TcHandle::from(converted), TcHandle::INGRESS);
    }
}
