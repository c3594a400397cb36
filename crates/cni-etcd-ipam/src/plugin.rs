//! etcd-ipam wired into the plugin SDK. ADD returns host-local's result shape (one address
//! with its gateway, the configured routes); DEL is idempotent; CHECK verifies the
//! attachment's handle; GC releases this node's handles of attachments the runtime no
//! longer has; STATUS fails with code 50 when etcd is unreachable or the pools are full.

use cni_sdk::{CniError, CniResult, GcErrors, Plugin, Request};
use cni_types::{Dns, IpConfig};

use super::agent;
use super::allocator::{Allocation, Allocator};
use super::config::EtcdIpamConf;
use super::error::EtcdIpamError;
use super::keys::handle_id;
use super::liveness;

/// The etcd-ipam plugin.
pub struct EtcdIpam;

const NOT_AVAILABLE: u32 = 50;

fn load(req: &Request) -> Result<Allocator, CniError> {
    let conf = parse(req)?;
    let mut client = conf.client()?;
    // Plugins of one node spread their connections over the members.
    client.prefer(std::process::id() as usize);
    Ok(Allocator::new(conf, client))
}

pub(crate) fn parse(req: &Request) -> Result<EtcdIpamConf, CniError> {
    req.args.check_known(&[])?;
    Ok(EtcdIpamConf::parse(&req.stdin)?)
}

impl Plugin for EtcdIpam {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = parse(req)?;
        let id = handle_id(&req.container_id, &req.ifname);
        let allocation = match &conf.agent_socket {
            Some(socket) => agent::allocate(socket, &req.stdin, &id, trace_id(req), conf.timeout * 4)?,
            None => load(req)?.allocate(&id)?,
        };
        Ok(result(&conf, allocation))
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = parse(req)?;
        let id = handle_id(&req.container_id, &req.ifname);
        match &conf.agent_socket {
            Some(socket) => agent::release(socket, &req.stdin, &id, trace_id(req), conf.timeout * 4)?,
            None => drop(load(req)?.release(&id)?),
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let mut allocator = load(req)?;
        let id = handle_id(&req.container_id, &req.ifname);
        let Some(handle) = allocator.handle(&id)? else {
            return Err(EtcdIpamError::CheckFailed(format!("no address is allocated to {id}")).into());
        };
        if let Some(prev) = req.prev_result()? {
            let expected: Vec<_> = prev
                .ips
                .iter()
                .map(|ip| ip.address.addr())
                .filter(|ip| allocator.conf.pools.iter().any(|p| p.contains(ip)))
                .collect();
            if !expected.is_empty() && !expected.contains(&handle.ip) {
                let msg = format!("{id} holds {} but the prevResult says {expected:?}", handle.ip);
                return Err(EtcdIpamError::CheckFailed(msg).into());
            }
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let mut allocator = load(req)?;
        let valid: Vec<String> =
            req.valid_attachments()?.iter().map(|a| handle_id(&a.container_id, &a.ifname)).collect();
        let node = allocator.conf.node.clone();
        liveness::heartbeat(&mut allocator)?;
        let mut errors = GcErrors::new();
        for (id, handle) in allocator.all_handles()? {
            // Another node's runtime knows its own attachments, not ours: only this node's
            // handles are this GC's to judge.
            if handle.node != node || valid.contains(&id) {
                continue;
            }
            if let Err(err) = allocator.release(&id) {
                errors.push(format!("handle {id} ({})", handle.ip), err.into());
            }
        }
        if allocator.conf.node_grace_seconds.is_some() {
            for gone in liveness::gone_nodes(&mut allocator)? {
                if let Err(err) = liveness::reclaim(&mut allocator, &gone) {
                    errors.push(format!("node {gone}"), err.into());
                }
            }
        }
        Ok(errors.into_result()?)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let mut allocator = load(req)?;
        let conf = allocator.conf.clone();
        if let Err(err) = liveness::heartbeat(&mut allocator) {
            return Err(CniError::new(NOT_AVAILABLE, err.to_string()));
        }
        match allocator.has_room() {
            Ok(true) => Ok(()),
            Ok(false) => Err(CniError::new(
                NOT_AVAILABLE,
                format!("etcd-ipam: pools {:?} of network {} are exhausted", conf.pools, conf.network),
            )),
            Err(err) => Err(CniError::new(NOT_AVAILABLE, err.to_string())),
        }
    }

    fn about(&self) -> String {
        "etcd-ipam (cni-rs): cluster-wide IPAM, blocks with node affinity in etcd".to_string()
    }
}

/// ADD's result: host-local's shape, one address with its gateway and the configured routes.
pub(crate) fn result(conf: &EtcdIpamConf, allocation: Allocation) -> CniResult {
    CniResult {
        interfaces: Vec::new(),
        ips: vec![IpConfig {
            interface: None,
            address: allocation.address,
            gateway: Some(allocation.gateway),
        }],
        routes: conf.routes.clone(),
        dns: Dns::default(),
    }
}

/// The runtime's trace id, passed to the node agent with each request.
fn trace_id(req: &Request) -> Option<&str> {
    req.trace.as_ref().map(|t| t.trace_id())
}
