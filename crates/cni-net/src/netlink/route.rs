//! Routes: add, replace, delete, list; single-path and multipath (ECMP); any table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric, RouteNextHop,
    RouteNextHopFlags,
};
pub use netlink_packet_route::route::{RouteProtocol, RouteScope, RouteType};
use netlink_packet_route::RouteNetlinkMessage;

use super::addr::IpFamily;
use super::{context, Netlink};
use crate::error::{Error, Result};

/// The main routing table (254), where routes go unless told otherwise.
pub const MAIN_TABLE: u32 = 254;

/// One path of a multipath route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHop {
    pub gateway: Option<IpAddr>,
    /// Outgoing interface index.
    pub oif: u32,
    /// Relative weight, 1..=256 (stored by the kernel as `weight - 1`).
    pub weight: u16,
    pub onlink: bool,
}

impl NextHop {
    /// A next hop through `gateway` on interface `oif`, weight 1.
    pub fn via(gateway: IpAddr, oif: u32) -> NextHop {
        NextHop { gateway: Some(gateway), oif, weight: 1, onlink: false }
    }
}

/// A route. Build one with [`Route::new`] and the builder methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix (`0.0.0.0/0` / `::/0` for the default route).
    pub destination: IpNet,
    pub gateway: Option<IpAddr>,
    /// Outgoing interface index.
    pub oif: Option<u32>,
    pub table: u32,
    /// Metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// `None`: link scope for a route without a gateway or next hops, universe otherwise.
    pub scope: Option<RouteScope>,
    pub protocol: RouteProtocol,
    pub kind: RouteType,
    /// Preferred source address.
    pub source: Option<IpAddr>,
    /// Treat the gateway as directly reachable even if no prefix covers it.
    pub onlink: bool,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    /// Multipath next hops; when non-empty, `gateway`/`oif` are not used.
    pub nexthops: Vec<NextHop>,
}

impl Route {
    /// A unicast route to `destination` in the main table, protocol `boot` (like `ip route`).
    pub fn new(destination: IpNet) -> Route {
        Route {
            destination: destination.trunc(),
            gateway: None,
            oif: None,
            table: MAIN_TABLE,
            priority: None,
            scope: None,
            protocol: RouteProtocol::Boot,
            kind: RouteType::Unicast,
            source: None,
            onlink: false,
            mtu: None,
            advmss: None,
            nexthops: Vec::new(),
        }
    }

    /// The default route of a family.
    pub fn default_route(family: IpFamily) -> Route {
        Route::new(match family {
            IpFamily::V4 => IpNet::new(Ipv4Addr::UNSPECIFIED.into(), 0).expect("valid"),
            IpFamily::V6 => IpNet::new(Ipv6Addr::UNSPECIFIED.into(), 0).expect("valid"),
        })
    }

    pub fn gateway(mut self, gateway: IpAddr) -> Self {
        self.gateway = Some(gateway);
        self
    }

    pub fn oif(mut self, index: u32) -> Self {
        self.oif = Some(index);
        self
    }

    pub fn table(mut self, table: u32) -> Self {
        self.table = table;
        self
    }

    pub fn priority(mut self, metric: u32) -> Self {
        self.priority = Some(metric);
        self
    }

    pub fn scope(mut self, scope: RouteScope) -> Self {
        self.scope = Some(scope);
        self
    }

    pub fn source(mut self, source: IpAddr) -> Self {
        self.source = Some(source);
        self
    }

    pub fn protocol(mut self, protocol: RouteProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    pub fn onlink(mut self) -> Self {
        self.onlink = true;
        self
    }

    pub fn nexthops(mut self, nexthops: Vec<NextHop>) -> Self {
        self.nexthops = nexthops;
        self
    }

    /// True for `0.0.0.0/0` and `::/0`.
    pub fn is_default(&self) -> bool {
        self.destination.prefix_len() == 0
    }

    fn family(&self) -> IpFamily {
        IpFamily::of(self.destination.addr())
    }

    fn effective_scope(&self) -> RouteScope {
        self.scope.unwrap_or(
            if self.gateway.is_none() && self.nexthops.is_empty() && self.kind == RouteType::Unicast {
                RouteScope::Link
            } else {
                RouteScope::Universe
            },
        )
    }

    fn to_message(&self, for_delete: bool) -> Result<RouteMessage> {
        let family = self.family();
        for gateway in self.gateway.iter().chain(self.nexthops.iter().filter_map(|hop| hop.gateway.as_ref()))
        {
            if IpFamily::of(*gateway) != family {
                return Err(Error::InvalidArgument(format!(
                    "gateway {gateway} is not in the family of {}",
                    self.destination
                )));
            }
        }
        let mut message = RouteMessage::default();
        let header = &mut message.header;
        header.address_family = IpFamily::to_netlink(Some(family));
        header.destination_prefix_length = self.destination.prefix_len();
        header.table = u8::try_from(self.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        if for_delete {
            // Match any scope/protocol, like `ip route del`.
            header.scope = RouteScope::NoWhere;
            header.protocol = RouteProtocol::Unspec;
            header.kind = self.kind;
        } else {
            header.scope = self.effective_scope();
            header.protocol = self.protocol;
            header.kind = self.kind;
        }
        if self.onlink {
            header.flags = RouteFlags::Onlink;
        }
        let attributes = &mut message.attributes;
        attributes.push(RouteAttribute::Table(self.table));
        if self.destination.prefix_len() > 0 {
            attributes.push(RouteAttribute::Destination(route_address(self.destination.addr())));
        }
        if self.nexthops.is_empty() {
            if let Some(gateway) = self.gateway {
                attributes.push(RouteAttribute::Gateway(route_address(gateway)));
            }
            if let Some(oif) = self.oif {
                attributes.push(RouteAttribute::Oif(oif));
            }
        } else {
            attributes.push(RouteAttribute::MultiPath(
                self.nexthops.iter().map(encode_nexthop).collect::<Result<_>>()?,
            ));
        }
        if let Some(priority) = self.priority {
            attributes.push(RouteAttribute::Priority(priority));
        }
        if let Some(source) = self.source {
            attributes.push(RouteAttribute::PrefSource(route_address(source)));
        }
        let mut metrics = Vec::new();
        metrics.extend(self.mtu.map(RouteMetric::Mtu));
        metrics.extend(self.advmss.map(RouteMetric::Advmss));
        if !metrics.is_empty() && !for_delete {
            attributes.push(RouteAttribute::Metrics(metrics));
        }
        Ok(message)
    }

    pub(crate) fn from_message(message: &RouteMessage) -> Option<Route> {
        let header = &message.header;
        let unspecified = match header.address_family {
            netlink_packet_route::AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            netlink_packet_route::AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        let mut route = Route::new(IpNet::new(unspecified, 0).ok()?);
        route.table = header.table as u32;
        route.scope = Some(header.scope);
        route.protocol = header.protocol;
        route.kind = header.kind;
        route.onlink = header.flags.contains(RouteFlags::Onlink);
        let mut destination = unspecified;
        for attribute in &message.attributes {
            match attribute {
                RouteAttribute::Destination(addr) => destination = ip_of(addr)?,
                RouteAttribute::Gateway(addr) => route.gateway = ip_of(addr),
                RouteAttribute::Oif(oif) => route.oif = Some(*oif),
                RouteAttribute::Table(table) => route.table = *table,
                RouteAttribute::Priority(priority) => route.priority = Some(*priority),
                RouteAttribute::PrefSource(addr) => route.source = ip_of(addr),
                RouteAttribute::MultiPath(hops) => route.nexthops = hops.iter().map(decode_nexthop).collect(),
                RouteAttribute::Metrics(metrics) => {
                    for metric in metrics {
                        match metric {
                            RouteMetric::Mtu(mtu) => route.mtu = Some(*mtu),
                            RouteMetric::Advmss(advmss) => route.advmss = Some(*advmss),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        route.destination = IpNet::new(destination, header.destination_prefix_length).ok()?;
        Some(route)
    }
}

fn route_address(addr: IpAddr) -> RouteAddress {
    match addr {
        IpAddr::V4(addr) => RouteAddress::Inet(addr),
        IpAddr::V6(addr) => RouteAddress::Inet6(addr),
    }
}

fn ip_of(addr: &RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(addr) => Some(IpAddr::V4(*addr)),
        RouteAddress::Inet6(addr) => Some(IpAddr::V6(*addr)),
        _ => None,
    }
}

fn encode_nexthop(hop: &NextHop) -> Result<RouteNextHop> {
    if !(1..=256).contains(&hop.weight) {
        return Err(Error::InvalidArgument(format!("next hop weight {} is outside 1..=256", hop.weight)));
    }
    let mut encoded = RouteNextHop::default();
    encoded.interface_index = hop.oif;
    encoded.hops = (hop.weight - 1) as u8;
    if hop.onlink {
        encoded.flags = RouteNextHopFlags::Onlink;
    }
    if let Some(gateway) = hop.gateway {
        encoded.attributes.push(RouteAttribute::Gateway(route_address(gateway)));
    }
    Ok(encoded)
}

fn decode_nexthop(hop: &RouteNextHop) -> NextHop {
    NextHop {
        gateway: hop.attributes.iter().find_map(|attribute| match attribute {
            RouteAttribute::Gateway(addr) => ip_of(addr),
            _ => None,
        }),
        oif: hop.interface_index,
        weight: hop.hops as u16 + 1,
        onlink: hop.flags.contains(RouteNextHopFlags::Onlink),
    }
}

impl Netlink {
    /// Adds a route; `EEXIST` if an identical one is there.
    pub fn add_route(&mut self, route: &Route) -> Result<()> {
        self.write_route(route, NLM_F_CREATE | NLM_F_EXCL, "add")
    }

    /// Adds a route or replaces the one with the same destination/table/metric.
    pub fn replace_route(&mut self, route: &Route) -> Result<()> {
        self.write_route(route, NLM_F_CREATE | NLM_F_REPLACE, "replace")
    }

    fn write_route(&mut self, route: &Route, flags: u16, verb: &str) -> Result<()> {
        let message = route.to_message(false)?;
        context(self.request(RouteNetlinkMessage::NewRoute(message), flags), || describe(verb, route))
    }

    /// Deletes a route (`ESRCH` if none matches).
    pub fn delete_route(&mut self, route: &Route) -> Result<()> {
        let message = route.to_message(true)?;
        context(self.request(RouteNetlinkMessage::DelRoute(message), 0), || describe("delete", route))
    }

    /// Lists routes of a family, optionally of one table only (`None`: every table, including
    /// the kernel's `local` table).
    pub fn routes(&mut self, family: IpFamily, table: Option<u32>) -> Result<Vec<Route>> {
        let mut request = RouteMessage::default();
        request.header.address_family = IpFamily::to_netlink(Some(family));
        let replies =
            context(self.dump(RouteNetlinkMessage::GetRoute(request)), || format!("list {family:?} routes"))?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRoute(message) => Route::from_message(message),
                _ => None,
            })
            .filter(|route| table.is_none_or(|table| route.table == table))
            .collect())
    }
}

fn describe(verb: &str, route: &Route) -> String {
    let mut text = format!("{verb} route {}", route.destination);
    if let Some(gateway) = route.gateway {
        text += &format!(" via {gateway}");
    }
    if let Some(oif) = route.oif {
        text += &format!(" dev #{oif}");
    }
    if route.table != MAIN_TABLE {
        text += &format!(" table {}", route.table);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_round_trips_through_message() {
        let route = Route::new("10.2.0.0/16".parse().unwrap())
            .gateway("10.1.0.1".parse().unwrap())
            .oif(3)
            .table(1000)
            .priority(50)
            .onlink();
        let message = route.to_message(false).unwrap();
        assert_eq!(message.header.table, RouteHeader::RT_TABLE_UNSPEC);
        let parsed = Route::from_message(&message).unwrap();
        assert_eq!(parsed.destination, route.destination);
        assert_eq!(parsed.gateway, route.gateway);
        assert_eq!(parsed.table, 1000);
        assert_eq!(parsed.priority, Some(50));
        assert!(parsed.onlink);
        assert_eq!(parsed.scope, Some(RouteScope::Universe));
    }

    #[test]
    fn destination_is_truncated_and_scope_defaults_to_link_without_gateway() {
        let route = Route::new("10.2.3.4/16".parse().unwrap()).oif(2);
        assert_eq!(route.destination.to_string(), "10.2.0.0/16");
        assert_eq!(route.effective_scope(), RouteScope::Link);
    }

    #[test]
    fn multipath_weights_and_families_are_checked() {
        let hop = NextHop::via("10.0.0.1".parse().unwrap(), 2);
        let mut heavy = hop.clone();
        heavy.weight = 3;
        let route = Route::default_route(IpFamily::V4).nexthops(vec![hop, heavy]);
        let parsed = Route::from_message(&route.to_message(false).unwrap()).unwrap();
        assert_eq!(parsed.nexthops[1].weight, 3);
        let mut bad = NextHop::via("10.0.0.1".parse().unwrap(), 2);
        bad.weight = 0;
        assert!(Route::default_route(IpFamily::V4).nexthops(vec![bad]).to_message(false).is_err());
        let mixed = Route::default_route(IpFamily::V6).gateway("10.0.0.1".parse().unwrap());
        assert!(mixed.to_message(false).is_err());
    }
}
