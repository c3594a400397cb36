//! The floor: the kernel work of a W1 attachment done by one process over netlink, per
//! container: a veth whose peer is created in the container, the host end on the bridge
//! and up, the container end addressed, up, with a default route. What no plugin set can
//! beat (it pays no process start, no config parsing, no IPAM, no firewall).

use super::{BenchContext, SetOutcome};
use crate::error::{BenchError, Result};
use crate::sandbox::BenchHost;
use cni_net::netlink::{AddressFlags, BridgeOptions, IpFamily, LinkSpec, Route, VethSpec};
use cni_net::{NetNs, Netlink};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

pub struct Floor;

const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);

impl Floor {
    /// One round; the outcome's operations are "ADD" and "DEL" like W1's.
    pub fn run(&self, ctx: &BenchContext, out: &mut SetOutcome) -> Result<()> {
        let host = BenchHost::create(ctx.state_root())?;
        let (add, add_wall, del, del_wall) = host.netns.run(|| -> Result<_> {
            let net = |context: &str, e| BenchError::setup(context.to_string(), e);
            let mut netlink = Netlink::new().map_err(|e| net("open netlink", e))?;
            let bridge = netlink
                .add_bridge(&LinkSpec::new(crate::configs::BRIDGE), &BridgeOptions::default())
                .map_err(|e| net("create bridge", e))?
                .ok_or_else(|| BenchError::Check("bridge not found after creation".into()))?;
            let gateway = IpNet::new(GATEWAY.into(), 16).expect("valid prefix");
            netlink
                .add_address(bridge.index, gateway, AddressFlags::empty())
                .map_err(|e| net("address bridge", e))?;
            netlink.set_link_up(bridge.index).map_err(|e| net("bridge up", e))?;

            let started = Instant::now();
            let mut add = Vec::with_capacity(ctx.containers);
            for index in 0..ctx.containers {
                crate::interrupt::check()?;
                let call = Instant::now();
                attach(&mut netlink, bridge.index, ctx.pool.get(index).ns(), index)
                    .map_err(|e| net(&format!("attach container {index}"), e))?;
                add.push(call.elapsed());
            }
            let add_wall = started.elapsed();
            let started = Instant::now();
            let mut del = Vec::with_capacity(ctx.containers);
            for index in 0..ctx.containers {
                let call = Instant::now();
                netlink.delete_link_by_name(&host_end(index)).map_err(|e| net("delete veth", e))?;
                del.push(call.elapsed());
            }
            Ok((add, add_wall, del, started.elapsed()))
        })??;
        // The kernel's own cost grows with the ports on the bridge: the plugins' flatness
        // is best judged against this.
        out.op("ADD").add_phase(add.iter().copied(), add_wall);
        super::chain::record_flatness(out, &add);
        out.op("DEL").add_phase(del, del_wall);
        Ok(())
    }
}

fn host_end(index: usize) -> String {
    format!("cnkv{index}")
}

/// The container's address: 10.99.0.0/16 from .2 on.
fn container_address(index: usize) -> IpNet {
    let host = index as u32 + 2;
    let addr = Ipv4Addr::from(u32::from(GATEWAY) - 1 + host);
    IpNet::new(addr.into(), 16).expect("valid prefix")
}

fn attach(host: &mut Netlink, bridge: u32, container: &NetNs, index: usize) -> cni_net::Result<()> {
    // A plugin has to open a socket in the container too: part of the work.
    let mut inside = Netlink::in_ns(container)?;
    let host_link = host
        .add_veth(&VethSpec {
            link: LinkSpec::new(host_end(index)),
            peer: LinkSpec::new("eth0").netns(container),
        })?
        .ok_or_else(|| cni_net::Error::InvalidArgument("host end of veth not found".into()))?;
    host.set_link_master(host_link.index, bridge)?;
    host.set_link_up(host_link.index)?;
    let eth0 = inside.require_link("eth0")?;
    inside.add_address(eth0.index, container_address(index), AddressFlags::empty())?;
    inside.set_link_up(eth0.index)?;
    inside.add_route(&Route::default_route(IpFamily::V4).gateway(IpAddr::V4(GATEWAY)))?;
    Ok(())
}

/// Runs one round of the floor (it has no plugin set) into `out`.
pub fn run_floor_round(ctx: &mut BenchContext, out: &mut SetOutcome, round: usize) {
    if !out.ran() {
        return;
    }
    eprintln!("cni-bench: floor round {round}");
    if let Err(e) = Floor.run(ctx, out) {
        eprintln!("cni-bench: floor failed: {e}");
        out.status = super::Status::Failed(e.to_string());
    }
    super::after_run(ctx, out);
    out.fact("rounds", round as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_addresses_start_after_the_gateway() {
        assert_eq!(container_address(0).to_string(), "10.99.0.2/16");
        assert_eq!(container_address(254).to_string(), "10.99.1.0/16");
    }
}
