//! `static` IPAM: hands out exactly the addresses it is given.
//!
//! Addresses come from `ipam.addresses`, then CNI_ARGS `IP=` (CIDRs, comma-separated, with
//! `GATEWAY=` paired by position), then `args.cni.ips`, then `runtimeConfig.ips`. It keeps
//! no state, so DEL and GC have nothing to release.

use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::{Dns, ErrorCode, IpConfig, Route};
use ipnet::IpNet;
use serde::Deserialize;
use std::net::IpAddr;

#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    ipam: StaticConf,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StaticConf {
    #[serde(default)]
    addresses: Vec<AddressConf>,
    #[serde(default)]
    routes: Vec<Route>,
    #[serde(default)]
    dns: Option<Dns>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct AddressConf {
    address: IpNet,
    #[serde(default)]
    gateway: Option<IpAddr>,
}

pub struct StaticIpam;

fn parse_cidr(field: &str, text: &str) -> Result<IpNet, CniError> {
    text.trim().parse().map_err(|_| {
        CniError::invalid_config(format!(
            "static: {field}: {text:?} is not an address with a prefix (e.g. 10.1.2.3/24)"
        ))
    })
}

fn string_list(field: &str, value: Option<&serde_json::Value>) -> Result<Vec<String>, CniError> {
    value.map_or(Ok(Vec::new()), |v| cni_sdk::config::parse_value(field, v))
}

/// Every address to hand out, in precedence order, without repeats.
fn addresses(req: &Request, conf: &StaticConf) -> Result<Vec<AddressConf>, CniError> {
    let mut all = conf.addresses.clone();
    if let Some(ips) = req.args.get("IP") {
        let gateways: Vec<&str> = req.args.get("GATEWAY").map(|g| g.split(',').collect()).unwrap_or_default();
        for (i, ip) in ips.split(',').enumerate() {
            let gateway = match gateways.get(i) {
                // CNI_ARGS comes from the environment: code 4, as for a malformed pair.
                Some(g) => Some(g.trim().parse().map_err(|_| {
                    CniError::new(
                        ErrorCode::InvalidEnvironment,
                        format!("static: CNI_ARGS GATEWAY: {g:?} is not an IP address"),
                    )
                })?),
                None => None,
            };
            let address = parse_cidr("CNI_ARGS IP", ip)
                .map_err(|e| CniError::new(ErrorCode::InvalidEnvironment, e.msg))?;
            all.push(AddressConf { address, gateway });
        }
    }
    for ip in string_list("args.cni.ips", req.conf.args_cni().and_then(|a| cni_types::fold::get(a, "ips")))? {
        all.push(AddressConf { address: parse_cidr("args.cni.ips", &ip)?, gateway: None });
    }
    for ip in string_list("runtimeConfig.ips", req.conf.runtime_config("ips"))? {
        all.push(AddressConf { address: parse_cidr("runtimeConfig.ips", &ip)?, gateway: None });
    }
    let mut seen = std::collections::HashSet::new();
    all.retain(|a| seen.insert(a.address));
    for a in &all {
        if let Some(gw) = a.gateway {
            if gw.is_ipv4() != a.address.addr().is_ipv4() {
                return Err(CniError::invalid_config(format!(
                    "static: gateway {gw} is not in the same family as address {}",
                    a.address
                )));
            }
        }
    }
    if all.is_empty() {
        return Err(CniError::invalid_config("static: no addresses: set ipam.addresses or pass IP= / ips"));
    }
    Ok(all)
}

impl StaticIpam {
    pub(crate) fn load(req: &Request) -> Result<(StaticConf, Vec<AddressConf>), CniError> {
        let conf: RawConf = req.config()?;
        let addrs = addresses(req, &conf.ipam)?;
        Ok((conf.ipam, addrs))
    }
}

impl Plugin for StaticIpam {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let (conf, addrs) = Self::load(req)?;
        Ok(CniResult {
            interfaces: vec![],
            ips: addrs
                .into_iter()
                .map(|a| IpConfig { interface: None, address: a.address, gateway: a.gateway })
                .collect(),
            routes: conf.routes,
            dns: conf.dns.unwrap_or_default(),
        })
    }

    fn del(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }

    /// Every configured address must be in prevResult, with its gateway when one is set.
    fn check(&self, req: &Request) -> Result<(), CniError> {
        let (_, addrs) = Self::load(req)?;
        let prev = req.require_prev_result()?;
        for a in addrs {
            let found = prev.ips.iter().find(|ip| ip.address.addr() == a.address.addr());
            match found {
                None => {
                    return Err(CniError::internal(format!(
                        "static: address {} is missing from the result on {}",
                        a.address, req.ifname
                    )))
                }
                Some(ip) if a.gateway.is_some() && ip.gateway != a.gateway => {
                    return Err(CniError::internal(format!(
                        "static: address {} on {} has gateway {:?}, expected {:?}",
                        a.address, req.ifname, ip.gateway, a.gateway
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn about(&self) -> String {
        "static: assigns the addresses it is configured or asked for".into()
    }
}
