//! host-local wired into the plugin SDK: ADD returns the abbreviated IPAM result (addresses
//! with gateways, the configured routes, DNS from `resolvConf`); DEL releases by the
//! prevResult's addresses and the index; CHECK verifies the prevResult's addresses; GC
//! releases everything not in `cni.dev/valid-attachments`; STATUS fails with code 50 when a
//! range set is full.

use std::net::IpAddr;

use cni_sdk::{CniError, CniResult, GcErrors, Plugin, Request};
use cni_types::{Dns, IpConfig, Route};

use super::config::HostLocalConf;
use super::error::{codes, HostLocalError};
use super::GcOutcome;

/// The host-local IPAM plugin.
pub struct HostLocal;

impl From<HostLocalError> for CniError {
    fn from(err: HostLocalError) -> CniError {
        CniError::new(err.cni_code(), err.to_string())
    }
}

pub(crate) fn load(req: &Request) -> Result<HostLocalConf, CniError> {
    // As the reference: CNI_ARGS may carry only IP unless IgnoreUnknown is set.
    req.args.check_known(&["IP"])?;
    let args = req.args.to_env_string();
    Ok(HostLocalConf::parse(&req.stdin, Some(&args))?)
}

/// The prevResult's addresses that fall into this configuration's ranges.
fn prev_result_ips(req: &Request, conf: &HostLocalConf) -> Vec<IpAddr> {
    let Ok(Some(prev)) = req.prev_result() else {
        return Vec::new();
    };
    prev.ips
        .iter()
        .map(|ip| ip.address.addr())
        .filter(|ip| conf.range_sets.iter().any(|set| set.contains(*ip)))
        .collect()
}

fn routes(conf: &HostLocalConf) -> Result<Vec<Route>, CniError> {
    conf.routes
        .iter()
        .map(|spec| {
            let mut object = spec.extra.clone();
            object.insert("dst".into(), spec.dst.to_string().into());
            if let Some(gw) = spec.gw {
                object.insert("gw".into(), gw.to_string().into());
            }
            serde_json::from_value(object.into())
                .map_err(|e| CniError::invalid_config(format!("host-local: route to {}: {e}", spec.dst)))
        })
        .collect()
}

/// Reads a resolv.conf-style file the way the reference does: `nameserver`, `domain`,
/// `search` and `options` lines; comments (`#`, `;`) and other lines are skipped.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 2 {
            continue;
        }
        let rest = fields[1..].iter().map(|s| s.to_string());
        match fields[0] {
            "nameserver" => dns.nameservers.push(fields[1].to_string()),
            "domain" => dns.domain = fields[1].to_string(),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

fn dns(conf: &HostLocalConf) -> Result<Dns, CniError> {
    match &conf.resolv_conf {
        None => Ok(Dns::default()),
        Some(path) => std::fs::read_to_string(path)
            .map(|text| parse_resolv_conf(&text))
            .map_err(|e| CniError::io(format!("host-local: reading resolvConf {path}: {e}"))),
    }
}

impl Plugin for HostLocal {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(req)?;
        // Everything that can fail without side effects comes before the allocation.
        let routes = routes(&conf)?;
        let dns = dns(&conf)?;
        let allocations = super::allocate(&conf, &req.container_id, &req.ifname)?;
        Ok(CniResult {
            interfaces: Vec::new(),
            ips: allocations
                .into_iter()
                .map(|a| IpConfig { interface: None, address: a.address, gateway: Some(a.gateway) })
                .collect(),
            routes,
            dns,
        })
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let known = prev_result_ips(req, &conf);
        super::release(&conf, &req.container_id, &req.ifname, &known)?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let expected = prev_result_ips(req, &conf);
        Ok(super::check(&conf, &req.container_id, &req.ifname, &expected)?)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let GcOutcome { failures, .. } = super::gc(&conf, &req.valid_attachments()?)?;
        let mut errors = GcErrors::new();
        for (ip, failure) in failures {
            errors.push(format!("address {ip}"), failure.into());
        }
        Ok(errors.into_result()?)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        match super::status(&conf) {
            Err(err @ HostLocalError::Exhausted { .. }) => {
                Err(CniError::new(codes::NOT_AVAILABLE, err.to_string()))
            }
            other => Ok(other?),
        }
    }

    fn about(&self) -> String {
        "host-local IPAM (cni-rs): allocates addresses from ranges, state on the local disk".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_like_the_reference() {
        let dns = parse_resolv_conf(
            "# comment\n; other\nnameserver 10.0.0.53\nnameserver fd00::53\ndomain example.org\n\
             search a.example b.example\noptions ndots:2 rotate\nsortlist 1.2.3.4\nnameserver\n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.53", "fd00::53"]);
        assert_eq!(dns.domain, "example.org");
        assert_eq!(dns.search, ["a.example", "b.example"]);
        assert_eq!(dns.options, ["ndots:2", "rotate"]);
    }
}
