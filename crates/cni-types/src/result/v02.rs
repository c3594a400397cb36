//! The 0.1.0 / 0.2.0 layout: one `ip4` and one `ip6` object, routes inside them.

use super::{CniResult, IpConfig, ResultError, Route};
use crate::config::Dns;
use crate::version::Version;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

#[derive(Serialize, Deserialize)]
pub(super) struct ResultV02 {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<IpConfigV02>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<IpConfigV02>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct IpConfigV02 {
    ip: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<RouteV0>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct RouteV0 {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

impl From<&Route> for RouteV0 {
    fn from(r: &Route) -> RouteV0 {
        RouteV0 { dst: r.dst, gw: r.gw }
    }
}

impl From<RouteV0> for Route {
    fn from(r: RouteV0) -> Route {
        Route::new(r.dst, r.gw)
    }
}

impl From<ResultV02> for CniResult {
    fn from(r: ResultV02) -> CniResult {
        let mut result = CniResult { dns: r.dns, ..Default::default() };
        for ip in [r.ip4, r.ip6].into_iter().flatten() {
            result.ips.push(IpConfig { interface: None, address: ip.ip, gateway: ip.gateway });
            result.routes.extend(ip.routes.into_iter().map(Route::from));
        }
        result
    }
}

impl ResultV02 {
    /// Keeps the first address of each family; routes go with their family's address.
    pub(super) fn from_model(model: &CniResult, version: Version) -> Result<ResultV02, ResultError> {
        let first = |v4: bool| {
            model.ips.iter().find(|ip| ip.is_ipv4() == v4).map(|ip| IpConfigV02 {
                ip: ip.address,
                gateway: ip.gateway,
                routes: model
                    .routes
                    .iter()
                    .filter(|r| r.dst.addr().is_ipv4() == v4)
                    .map(RouteV0::from)
                    .collect(),
            })
        };
        let (ip4, ip6) = (first(true), first(false));
        if ip4.is_none() && ip6.is_none() {
            return Err(ResultError::NoAddressForV02(version));
        }
        Ok(ResultV02 { cni_version: version.to_string(), ip4, ip6, dns: model.dns.clone() })
    }
}
