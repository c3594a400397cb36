//! Address ranges and range sets: validation and the arithmetic the allocator needs.
//!
//! Addresses are handled as `u128` values tagged with their family, so IPv4 and IPv6 share
//! one code path.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// One validated range: `rangeStart..=rangeEnd` inside `subnet`, with a gateway that is
/// never handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The subnet, with host bits cleared.
    pub subnet: IpNet,
    /// First address that may be allocated (inclusive).
    pub start: IpAddr,
    /// Last address that may be allocated (inclusive).
    pub end: IpAddr,
    /// The gateway: returned in results, never allocated.
    pub gateway: IpAddr,
}

/// The raw, unvalidated fields of one range as they appear in the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct RangeSpec {
    #[serde(default)]
    pub subnet: String,
    #[serde(rename = "rangeStart", default, skip_serializing_if = "Option::is_none")]
    pub range_start: Option<String>,
    #[serde(rename = "rangeEnd", default, skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// Address as a number (IPv4 in the low 32 bits).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Inverse of [`to_u128`] for the family of `like`.
pub fn from_u128(value: u128, like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(value as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

fn parse_ip(field: &str, text: &str) -> Result<IpAddr, String> {
    text.trim().parse::<IpAddr>().map_err(|_| format!("{field}: invalid IP address {text:?}"))
}

impl Range {
    /// Validates one range the way the reference does, with messages naming the field.
    /// `field` is the JSON path of the range (e.g. `ipam.ranges[0][1]`), used in messages.
    pub fn from_spec(spec: &RangeSpec, field: &str) -> Result<Range, String> {
        if spec.subnet.trim().is_empty() {
            return Err(format!("{field}.subnet: missing"));
        }
        let subnet: IpNet = spec
            .subnet
            .trim()
            .parse()
            .map_err(|_| format!("{field}.subnet: invalid CIDR {:?}", spec.subnet))?;
        if subnet.addr() != subnet.network() {
            return Err(format!(
                "{field}.subnet: network {} has host bits set; for a prefix length of {} the network address is {}",
                subnet,
                subnet.prefix_len(),
                subnet.network()
            ));
        }
        // Like the reference: a network needs at least two host bits, otherwise nothing is
        // left after the network address, the gateway and (IPv4) the broadcast address.
        if subnet.prefix_len() + 2 > subnet.max_prefix_len() {
            return Err(format!(
                "{field}.subnet: network {subnet} too small to allocate from (the smallest is /{})",
                subnet.max_prefix_len() - 2
            ));
        }
        let network = subnet.network();
        let first_host = from_u128(to_u128(network) + 1, network);
        let gateway = match &spec.gateway {
            Some(text) => {
                let gw = parse_ip(&format!("{field}.gateway"), text)?;
                if gw.is_ipv4() != network.is_ipv4() {
                    return Err(format!(
                        "{field}.gateway: {gw} is not of the same address family as subnet {subnet}"
                    ));
                }
                gw
            }
            None => first_host,
        };
        let start = match &spec.range_start {
            Some(text) => {
                let ip = parse_ip(&format!("{field}.rangeStart"), text)?;
                if !subnet.contains(&ip) {
                    return Err(format!("{field}.rangeStart: {ip} not in network {subnet}"));
                }
                ip
            }
            None => first_host,
        };
        let end = match &spec.range_end {
            Some(text) => {
                let ip = parse_ip(&format!("{field}.rangeEnd"), text)?;
                if !subnet.contains(&ip) {
                    return Err(format!("{field}.rangeEnd: {ip} not in network {subnet}"));
                }
                ip
            }
            None => last_usable(subnet),
        };
        if to_u128(start) > to_u128(end) {
            return Err(format!("{field}: rangeStart {start} is after rangeEnd {end}"));
        }
        Ok(Range { subnet, start, end, gateway })
    }

    /// Whether `ip` is between `start` and `end` (inclusive) and of the same family.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.start.is_ipv4()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(ip))
    }

    /// Whether `ip` may be handed out: not the network address, not the IPv4 broadcast
    /// address, not the gateway. (`start`/`end` may be configured to include them.)
    pub fn is_allocatable(&self, ip: IpAddr) -> bool {
        ip != self.gateway && ip != self.subnet.network() && !(ip.is_ipv4() && ip == self.subnet.broadcast())
    }

    /// Whether two ranges share an address.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.start.is_ipv4() == other.start.is_ipv4()
            && to_u128(self.start) <= to_u128(other.end)
            && to_u128(other.start) <= to_u128(self.end)
    }
}

/// The last address of a subnet that may be allocated by default: the broadcast address is
/// excluded for IPv4; IPv6 has no broadcast address.
fn last_usable(subnet: IpNet) -> IpAddr {
    let last = subnet.broadcast();
    match last {
        IpAddr::V4(_) => from_u128(to_u128(last) - 1, last),
        IpAddr::V6(_) => last,
    }
}

impl fmt::Display for Range {
    /// `start-end`, as the reference prints ranges in error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// A set of ranges of one family; each set yields one address per attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    pub ranges: Vec<Range>,
}

impl RangeSet {
    /// Validates a set: not empty, one family, no overlapping ranges. `field` is the JSON
    /// path of the set; ranges are named `field[i]` in messages.
    pub fn from_specs(specs: &[RangeSpec], field: &str) -> Result<RangeSet, String> {
        Self::from_named_specs(specs, field, |i| format!("{field}[{i}]"))
    }

    /// As [`RangeSet::from_specs`], with the JSON path of each range given by `range_field`.
    pub fn from_named_specs(
        specs: &[RangeSpec],
        field: &str,
        range_field: impl Fn(usize) -> String,
    ) -> Result<RangeSet, String> {
        if specs.is_empty() {
            return Err(format!("{field}: empty range set"));
        }
        let mut ranges = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            ranges.push(Range::from_spec(spec, &range_field(i))?);
        }
        let family_v4 = ranges[0].start.is_ipv4();
        for (i, r) in ranges.iter().enumerate() {
            if r.start.is_ipv4() != family_v4 {
                return Err(format!(
                    "{}: mixed address families in one range set ({} and {})",
                    range_field(i),
                    ranges[0].subnet,
                    r.subnet
                ));
            }
        }
        for (i, a) in ranges.iter().enumerate() {
            for (j, b) in ranges.iter().enumerate().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(format!("{field}: ranges {i} ({a}) and {j} ({b}) overlap"));
                }
            }
        }
        Ok(RangeSet { ranges })
    }

    /// Index of the range containing `ip`, if any.
    pub fn range_for(&self, ip: IpAddr) -> Option<usize> {
        self.ranges.iter().position(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.ranges.iter().any(|a| other.ranges.iter().any(|b| a.overlaps(b)))
    }

    pub fn is_ipv4(&self) -> bool {
        self.ranges[0].start.is_ipv4()
    }
}

impl fmt::Display for RangeSet {
    /// Ranges joined with `,`, as the reference prints a range set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(subnet: &str) -> RangeSpec {
        RangeSpec { subnet: subnet.into(), ..Default::default() }
    }

    #[test]
    fn defaults_for_ipv4() {
        let r = Range::from_spec(&spec("10.0.0.0/24"), "r").unwrap();
        assert_eq!(r.start.to_string(), "10.0.0.1");
        assert_eq!(r.end.to_string(), "10.0.0.254");
        assert_eq!(r.gateway.to_string(), "10.0.0.1");
        assert_eq!(r.to_string(), "10.0.0.1-10.0.0.254");
    }

    #[test]
    fn defaults_for_ipv6_include_last_address() {
        let r = Range::from_spec(&spec("fd00::/120"), "r").unwrap();
        assert_eq!(r.start.to_string(), "fd00::1");
        assert_eq!(r.end.to_string(), "fd00::ff");
    }

    #[test]
    fn rejects_too_small_and_host_bits() {
        for s in ["10.0.0.0/31", "10.0.0.1/32", "fd00::/127", "fd00::/128"] {
            let e = Range::from_spec(&spec(s), "ipam.subnet").unwrap_err();
            assert!(e.contains("too small") || e.contains("host bits"), "{s}: {e}");
            assert!(e.starts_with("ipam.subnet"), "{e}");
        }
        let e = Range::from_spec(&spec("10.0.0.5/24"), "r").unwrap_err();
        assert!(e.contains("host bits set"), "{e}");
        assert!(Range::from_spec(&spec("10.0.0.0/30"), "r").is_ok());
        assert!(Range::from_spec(&spec("fd00::/126"), "r").is_ok());
    }

    #[test]
    fn start_end_must_be_inside_and_ordered() {
        let mut s = spec("10.0.0.0/24");
        s.range_start = Some("10.0.1.5".into());
        assert!(Range::from_spec(&s, "r").unwrap_err().contains("r.rangeStart"));
        s.range_start = Some("10.0.0.50".into());
        s.range_end = Some("10.0.0.40".into());
        assert!(Range::from_spec(&s, "r").unwrap_err().contains("after rangeEnd"));
        s.range_end = Some("10.1.0.40".into());
        assert!(Range::from_spec(&s, "r").unwrap_err().contains("r.rangeEnd"));
        s.range_end = Some("bogus".into());
        assert!(Range::from_spec(&s, "r").unwrap_err().contains("invalid IP"));
    }

    #[test]
    fn set_rejects_mixed_families_and_overlaps() {
        let e = RangeSet::from_specs(&[spec("10.0.0.0/24"), spec("fd00::/64")], "s").unwrap_err();
        assert!(e.contains("mixed address families"), "{e}");
        let e = RangeSet::from_specs(&[spec("10.0.0.0/24"), spec("10.0.0.0/25")], "s").unwrap_err();
        assert!(e.contains("overlap"), "{e}");
        let set = RangeSet::from_specs(&[spec("10.0.0.0/24"), spec("10.0.1.0/24")], "s").unwrap();
        assert_eq!(set.to_string(), "10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254");
        assert_eq!(set.range_for("10.0.1.7".parse().unwrap()), Some(1));
        assert!(!set.contains("10.0.2.7".parse().unwrap()));
    }

    #[test]
    fn allocatable_excludes_network_broadcast_gateway() {
        let mut s = spec("10.0.0.0/24");
        s.range_start = Some("10.0.0.0".into());
        s.range_end = Some("10.0.0.255".into());
        let r = Range::from_spec(&s, "r").unwrap();
        assert!(!r.is_allocatable("10.0.0.0".parse().unwrap()));
        assert!(!r.is_allocatable("10.0.0.1".parse().unwrap()));
        assert!(!r.is_allocatable("10.0.0.255".parse().unwrap()));
        assert!(r.is_allocatable("10.0.0.2".parse().unwrap()));
    }
}
