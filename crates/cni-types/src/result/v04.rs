//! The 0.3.0 / 0.3.1 / 0.4.0 layout: `ips` carry a `version` of "4" or "6".

use super::v02::RouteV0;
use super::{CniResult, Interface, IpConfig, Route};
use crate::config::Dns;
use crate::version::Version;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

#[derive(Serialize, Deserialize)]
pub(super) struct ResultV04 {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<InterfaceV04>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ips: Vec<IpConfigV04>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<RouteV0>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    dns: Dns,
}

#[derive(Serialize, Deserialize)]
struct InterfaceV04 {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    mac: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    sandbox: String,
}

#[derive(Serialize, Deserialize)]
struct IpConfigV04 {
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
    address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
}

impl From<ResultV04> for CniResult {
    fn from(r: ResultV04) -> CniResult {
        CniResult {
            interfaces: r
                .interfaces
                .into_iter()
                .map(|i| Interface { name: i.name, mac: i.mac, sandbox: i.sandbox, ..Default::default() })
                .collect(),
            ips: r
                .ips
                .into_iter()
                .map(|ip| IpConfig { interface: ip.interface, address: ip.address, gateway: ip.gateway })
                .collect(),
            routes: r.routes.into_iter().map(Route::from).collect(),
            dns: r.dns,
        }
    }
}

impl ResultV04 {
    pub(super) fn from_model(model: &CniResult, version: Version) -> ResultV04 {
        ResultV04 {
            cni_version: version.to_string(),
            interfaces: model
                .interfaces
                .iter()
                .map(|i| InterfaceV04 {
                    name: i.name.clone(),
                    mac: i.mac.clone(),
                    sandbox: i.sandbox.clone(),
                })
                .collect(),
            ips: model
                .ips
                .iter()
                .map(|ip| IpConfigV04 {
                    version: if ip.is_ipv4() { "4" } else { "6" }.to_string(),
                    interface: ip.interface,
                    address: ip.address,
                    gateway: ip.gateway,
                })
                .collect(),
            routes: model.routes.iter().map(|r| RouteV0::from(&r.without_1_1_fields())).collect(),
            dns: model.dns.clone(),
        }
    }
}
