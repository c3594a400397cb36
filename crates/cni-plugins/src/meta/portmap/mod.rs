//! `portmap`: forwards host ports to the container (capability `portMappings`).
//!
//! A chained plugin: it needs the container's addresses from `prevResult` and passes that
//! result through. Connections to a local address of the host (`fib daddr type local`) on a
//! mapped port — from outside (prerouting) and from the host itself (output), including
//! 127.0.0.1 — are DNATed to the container; those from the loopback address or from the
//! container itself (hairpin), or all with `masqAll`, are marked and masqueraded so that
//! answers come back. Everything is nftables over netlink, no `iptables` process; see
//! [`rules`] for the layout and why DEL costs the same with 1 or 20 000 containers.

pub mod conditions;
pub mod config;
pub mod host;
pub mod rules;

use crate::common::{open_container_netns, reference_state, NetResultExt};
use cni_net::nft::NftClient;
use cni_net::Netlink;
use cni_sdk::{CniError, CniResult, ErrorCode, GcErrors, Plugin, Request};
use config::PortmapConf;
use host::ContainerIps;
use rules::{DispatchKey, Target};
use std::collections::HashSet;

pub struct Portmap;

fn nft_client() -> Result<crate::common::nft_attach::Client, CniError> {
    crate::common::nft_attach::client()
}

/// Each mapping, for each family the container has an address of and the mapping's
/// `hostIP` allows.
pub fn targets(conf: &PortmapConf, ips: &ContainerIps) -> Vec<Target> {
    let mut out = Vec::new();
    for m in &conf.mappings {
        for v6 in [false, true] {
            let Some(container_ip) = ips.get(v6) else { continue };
            if !m.host_ip.applies_to(v6) {
                continue;
            }
            out.push(Target {
                key: DispatchKey {
                    v6,
                    protocol: m.protocol,
                    host_port: m.host_port,
                    host_ip: m.host_ip.address(),
                },
                container_ip,
                container_port: m.container_port,
            });
        }
    }
    out
}

/// Before 0.3.0 a chained plugin may get no result to pass on: the addresses are then
/// read from the container's interface, and that is the result.
fn result_from_container(req: &Request) -> Result<CniResult, CniError> {
    let ns = open_container_netns(req)?;
    let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
    let link = nl.require_link(&req.ifname).or_cni("find the container interface")?;
    crate::common::iface::result_from_link(&mut nl, &link, &req.netns)
}

impl Plugin for Portmap {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = PortmapConf::load(req)?;
        let prev = match req.chained_prev_result()? {
            Some(prev) => prev,
            None => result_from_container(req)?,
        };
        let ips = ContainerIps::from_result(&prev, &req.ifname);
        let targets = targets(&conf, &ips);
        let who = req.attachment();
        if targets.is_empty() {
            // Nothing to map (most containers): like the reference, do not depend on
            // nftables then; but a repeated ADD should not keep an earlier ADD's mappings.
            if let Err(e) = nft_client().and_then(|mut nft| rules::detach(&mut nft, &req.conf.name, &who)) {
                eprintln!("portmap: cannot clear earlier mappings of {}: {e}", req.container_id);
            }
            return Ok(prev);
        }
        if let (true, Some(v4)) = (conf.snat, ips.v4) {
            host::enable_localnet_routing(&prev, v4)?;
        }
        rules::install(&mut *nft_client()?, &req.conf.name, &who, &conf, &targets)?;
        for t in targets.iter().filter(|t| t.key.protocol == config::Protocol::Udp) {
            host::flush_udp_conntrack(t.key.v6, t.key.host_port);
        }
        Ok(prev)
    }

    /// Needs neither the namespace nor prevResult, nor a configuration ADD would accept
    /// (a DEL that fails on config would block the container's removal for good): the
    /// attachment's chain names its map elements.
    fn del(&self, req: &Request) -> Result<(), CniError> {
        let mut nft = nft_client()?;
        let ours = rules::detach(&mut nft, &req.conf.name, &req.attachment());
        // The reference's chains for this attachment, on a node swapped to ours while its
        // containers ran: left behind, they would DNAT the host port to this address for
        // ever (to whichever container gets it next).
        let reference = reference_state::remove_portmap(&mut nft, &req.conf.name, &req.container_id);
        ours.and(reference)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = PortmapConf::load(req)?;
        let prev = req.require_prev_result()?;
        let ips = ContainerIps::from_result(&prev, &req.ifname);
        let expected: HashSet<DispatchKey> = targets(&conf, &ips).iter().map(|t| t.key).collect();
        let present: HashSet<DispatchKey> =
            rules::attached_keys(&mut *nft_client()?, &req.conf.name, &req.attachment())?
                .into_iter()
                .collect();
        let mut missing: Vec<String> = expected.difference(&present).map(DispatchKey::key).collect();
        let mut extra: Vec<String> = present.difference(&expected).map(DispatchKey::key).collect();
        missing.sort();
        extra.sort();
        if !missing.is_empty() {
            return Err(CniError::internal(format!("port mappings missing: {}", missing.join(", "))));
        }
        if !extra.is_empty() {
            return Err(CniError::internal(format!("unexpected port mappings: {}", extra.join(", "))));
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req.valid_attachments()?;
        let mut errors = GcErrors::new();
        let mut nft = nft_client()?;
        errors.merge(rules::gc(&mut nft, &req.conf.name, &valid));
        errors.record(
            "the reference plugins' port mappings",
            reference_state::gc_portmap(&mut nft, &req.conf.name, &valid),
        );
        Ok(errors.into_result()?)
    }

    /// Ready when nf_tables answers in this namespace.
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        let mut nft = NftClient::new()
            .map_err(|e| CniError::new(ErrorCode::NotAvailable, format!("nftables unavailable: {e}")))?;
        nft.get_table(cni_net::nft::Family::Inet, rules::TABLE)
            .map(drop)
            .map_err(|e| CniError::new(ErrorCode::NotAvailable, format!("nftables unavailable: {e}")))
    }

    fn about(&self) -> String {
        "portmap: forwards host ports to the container with nftables".into()
    }
}
