//! IPvlan links: interfaces sharing their parent's MAC address, told apart by IP address.

use netlink_packet_route::link::{InfoData, InfoIpVlan, InfoKind, IpVlanMode, LinkAttribute};

use super::{Link, LinkSpec, Netlink};
use crate::error::{Error, Result};

/// Where an IPvlan link switches packets: by MAC (l2), or routed in the parent's
/// namespace (l3, l3s: the latter also through its netfilter hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvlanMode {
    L2,
    L3,
    L3s,
}

impl std::str::FromStr for IpvlanMode {
    type Err = Error;

    fn from_str(text: &str) -> Result<IpvlanMode> {
        match text {
            "l2" => Ok(IpvlanMode::L2),
            "l3" => Ok(IpvlanMode::L3),
            "l3s" => Ok(IpvlanMode::L3s),
            other => Err(Error::InvalidArgument(format!("unknown ipvlan mode {other:?}"))),
        }
    }
}

impl Netlink {
    /// Creates an IPvlan link on `parent_index` (a device in this socket's namespace); with
    /// `spec.netns` it is made there directly. Returns it when it is in this socket's
    /// namespace.
    pub fn add_ipvlan(
        &mut self,
        spec: &LinkSpec<'_>,
        parent_index: u32,
        mode: IpvlanMode,
    ) -> Result<Option<Link>> {
        let mode = match mode {
            IpvlanMode::L2 => IpVlanMode::L2,
            IpvlanMode::L3 => IpVlanMode::L3,
            IpvlanMode::L3s => IpVlanMode::L3S,
        };
        self.create_link(
            spec,
            InfoKind::IpVlan,
            Some(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
            vec![LinkAttribute::Link(parent_index)],
        )?;
        self.created(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("l3s".parse::<IpvlanMode>().unwrap(), IpvlanMode::L3s);
        assert!("bridge".parse::<IpvlanMode>().is_err());
    }
}
