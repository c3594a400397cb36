//! The `dnsname` configuration and what one ADD registers.
//!
//! Keys, as the reference: `domainName` (default `dns.podman`), the `aliases` capability
//! (`runtimeConfig.aliases`: network name → the container's aliases on it). The container's
//! name is `K8S_POD_NAME` from CNI_ARGS, which podman sets to the container's name. Ours
//! besides: `stateDir` (where records live, default `/run/cni/dnsname`) and `upstreams`
//! (servers, `ip` or `ip:port`, to forward other names to instead of the host's
//! resolv.conf), `bindPort` (the resolver's port on the gateways, default 1053, port 53
//! redirected to it; 53 makes it listen there directly, see `redirect`).

use cni_dns::{validate_domain, validate_host_name, HostRecord, MAX_ADDRESSES, MAX_ALIASES, MAX_UPSTREAMS};
use cni_sdk::{CniError, CniResult, Request};
use cni_types::ErrorCode;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    #[serde(rename = "domainName", default)]
    domain_name: Option<String>,
    #[serde(rename = "stateDir", default)]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    upstreams: Vec<String>,
    #[serde(rename = "bindPort", default)]
    bind_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DnsnameConf {
    pub network: String,
    /// Lower case, no trailing dot.
    pub domain: String,
    pub state_dir: PathBuf,
    pub upstreams: Vec<SocketAddr>,
    /// Where the resolver listens on the gateways; not 53 means port 53 is redirected.
    pub bind_port: u16,
}

fn parse_upstream(text: &str) -> Option<SocketAddr> {
    text.parse::<SocketAddr>().ok().or_else(|| text.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)))
}

pub fn load(req: &Request) -> Result<DnsnameConf, CniError> {
    let raw: RawConf = req.config()?;
    let domain = raw.domain_name.filter(|d| !d.is_empty()).unwrap_or_else(|| cni_dns::DEFAULT_DOMAIN.into());
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    validate_domain(&domain)
        .map_err(|e| CniError::invalid_config(format!("dnsname: domainName {domain:?} {e}")))?;
    if raw.upstreams.len() > MAX_UPSTREAMS {
        return Err(CniError::invalid_config(format!(
            "dnsname: upstreams: {} servers, at most {MAX_UPSTREAMS}",
            raw.upstreams.len()
        )));
    }
    let upstreams = raw
        .upstreams
        .iter()
        .map(|u| {
            parse_upstream(u).ok_or_else(|| {
                CniError::invalid_config(format!(
                    "dnsname: upstreams: {u:?} is not an address (ip or ip:port)"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let bind_port = raw.bind_port.unwrap_or(super::redirect::DEFAULT_BIND_PORT);
    if bind_port == 0 {
        return Err(CniError::invalid_config("dnsname: bindPort: 0 is not a port"));
    }
    Ok(DnsnameConf {
        bind_port,
        network: req.conf.name.clone(),
        domain,
        state_dir: raw.state_dir.unwrap_or_else(|| cni_dns::DEFAULT_STATE_DIR.into()),
        upstreams,
    })
}

/// The container's name from CNI_ARGS, checked as a DNS name.
pub fn container_name(req: &Request, conf: &DnsnameConf) -> Result<String, CniError> {
    let name = req.args.get("K8S_POD_NAME").filter(|n| !n.is_empty()).ok_or_else(|| {
        CniError::new(
            ErrorCode::InvalidEnvironment,
            "dnsname: CNI_ARGS has no K8S_POD_NAME (the container's name)",
        )
    })?;
    validate_host_name(name, &conf.domain).map_err(|e| {
        CniError::new(ErrorCode::InvalidEnvironment, format!("dnsname: K8S_POD_NAME {name:?} {e}"))
    })?;
    Ok(name.to_string())
}

/// The aliases podman passes for this network (`runtimeConfig.aliases[<network>]`).
pub fn aliases(req: &Request, conf: &DnsnameConf) -> Result<Vec<String>, CniError> {
    let Some(map) = req.conf.runtime_config("aliases") else { return Ok(Vec::new()) };
    let field = format!("runtimeConfig.aliases.{}", conf.network);
    let list = match map.get(&conf.network) {
        None | Some(serde_json::Value::Null) => return Ok(Vec::new()),
        Some(serde_json::Value::Array(list)) => list,
        Some(_) => return Err(CniError::invalid_config(format!("dnsname: {field}: not a list of names"))),
    };
    if list.len() > MAX_ALIASES {
        return Err(CniError::invalid_config(format!(
            "dnsname: {field}: {} aliases, at most {MAX_ALIASES}",
            list.len()
        )));
    }
    let mut aliases: Vec<String> = Vec::new();
    for value in list {
        let alias = value
            .as_str()
            .ok_or_else(|| CniError::invalid_config(format!("dnsname: {field}: {value} is not a name")))?;
        validate_host_name(alias, &conf.domain)
            .map_err(|e| CniError::invalid_config(format!("dnsname: {field}: {alias:?} {e}")))?;
        if !aliases.iter().any(|a| a.eq_ignore_ascii_case(alias)) {
            aliases.push(alias.to_string());
        }
    }
    Ok(aliases)
}

/// The container's addresses: as the reference, the only one when there is one, else those
/// on interfaces inside the sandbox (an address naming no interface counts too).
pub fn addresses(prev: &CniResult) -> Result<Vec<IpAddr>, CniError> {
    let mut found: Vec<IpAddr> = Vec::new();
    for ip in &prev.ips {
        let in_sandbox = match ip.interface {
            None => true,
            Some(i) => prev.interfaces.get(i).is_some_and(|iface| !iface.sandbox.is_empty()),
        };
        if (prev.ips.len() == 1 || in_sandbox) && !found.contains(&ip.address.addr()) {
            found.push(ip.address.addr());
        }
    }
    if found.is_empty() {
        return Err(CniError::invalid_config("dnsname: prevResult has no address of the container"));
    }
    if found.len() > MAX_ADDRESSES {
        return Err(CniError::invalid_config(format!(
            "dnsname: prevResult has {} addresses, at most {MAX_ADDRESSES}",
            found.len()
        )));
    }
    Ok(found)
}

/// Where the resolver answers: the gateways of the container's addresses (the bridge's
/// addresses on the network).
pub fn gateways(prev: &CniResult) -> Result<Vec<IpAddr>, CniError> {
    let mut gateways: Vec<IpAddr> = Vec::new();
    for gateway in prev.ips.iter().filter_map(|ip| ip.gateway) {
        if !gateways.contains(&gateway) {
            gateways.push(gateway);
        }
    }
    if gateways.is_empty() {
        return Err(CniError::invalid_config(
            "dnsname: prevResult has no gateway address to answer on (use a bridge with isGateway)",
        ));
    }
    Ok(gateways)
}

/// Who may ask the resolver: the prefixes of the addresses that have a gateway (the
/// network's subnets, e.g. 10.89.0.0/24 for 10.89.0.5/24).
pub fn subnets(prev: &CniResult) -> Vec<ipnet::IpNet> {
    let mut subnets: Vec<ipnet::IpNet> = Vec::new();
    for ip in prev.ips.iter().filter(|ip| ip.gateway.is_some()) {
        let subnet = ip.address.trunc();
        if !subnets.contains(&subnet) {
            subnets.push(subnet);
        }
    }
    subnets
}

/// The host-side interface the containers reach the gateway through: the bridge, which
/// the bridge plugin reports as the result's first interface outside the sandbox. The
/// resolver answers only queries that arrive there (dnsmasq under the reference plugin was
/// bound to the bridge the same way).
pub fn bridge(prev: &CniResult) -> Result<String, CniError> {
    prev.interfaces
        .iter()
        .find(|iface| iface.sandbox.is_empty() && !iface.name.is_empty())
        .map(|iface| iface.name.clone())
        .ok_or_else(|| {
            CniError::invalid_config(
                "dnsname: prevResult.interfaces has no host-side interface (the bridge) to answer on",
            )
        })
}

/// The record ADD writes for this attachment.
pub fn host_record(req: &Request, conf: &DnsnameConf, prev: &CniResult) -> Result<HostRecord, CniError> {
    Ok(HostRecord {
        container_id: req.container_id.clone(),
        ifname: req.ifname.clone(),
        name: container_name(req, conf)?,
        aliases: aliases(req, conf)?,
        addresses: addresses(prev)?,
    })
}
