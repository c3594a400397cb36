//! The bridge as the containers' gateway: which gateway each address gets, the default
//! routes `isDefaultGateway` adds, and the gateway addresses on the bridge itself.

use super::config::BridgeConf;
use crate::common::NetResultExt;
use cni_net::netlink::{AddressFlags, IpFamily};
use cni_net::Idempotent;
use cni_net::{Link, Netlink};
use cni_sdk::{CniError, CniResult};
use cni_types::Route;
use ipnet::IpNet;
use std::net::IpAddr;

/// The first address of the subnet `addr` is in: the default gateway of a network.
pub fn first_host(addr: &IpNet) -> IpAddr {
    match addr.network() {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a).wrapping_add(1)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a).wrapping_add(1)).into()),
    }
}

fn default_dst(v4: bool) -> IpNet {
    if v4 {
        "0.0.0.0/0".parse().expect("valid")
    } else {
        "::/0".parse().expect("valid")
    }
}

/// Points every address at the container interface (`iface`), fills in missing gateways
/// when the bridge is the gateway, adds a default route per family for
/// `isDefaultGateway` unless the result already has one, and returns the addresses the
/// bridge must carry (gateway with the container's prefix length).
pub fn plan(result: &mut CniResult, conf: &BridgeConf, iface: usize) -> Vec<IpNet> {
    let mut bridge_addresses = Vec::new();
    for i in 0..result.ips.len() {
        let ip = &mut result.ips[i];
        ip.interface = Some(iface);
        if ip.gateway.is_none() && conf.is_gateway {
            ip.gateway = Some(first_host(&ip.address));
        }
        let (v4, gateway, prefix) = (ip.is_ipv4(), ip.gateway, ip.address.prefix_len());
        if conf.is_default_gateway {
            let has_default = result.routes.iter().any(|r| r.dst == default_dst(v4) && r.gw.is_some());
            if !has_default {
                result.routes.push(Route::new(default_dst(v4), gateway));
            }
        }
        if let (true, Some(gw)) = (conf.is_gateway, gateway) {
            let net = IpNet::new(gw, prefix).expect("prefix of a valid address");
            if !bridge_addresses.contains(&net) {
                bridge_addresses.push(net);
            }
        }
    }
    bridge_addresses
}

/// Puts gateway address `gw` on the bridge. Another IPv4 address, or an overlapping IPv6
/// one, is a conflict: replaced with `forceAddress`, an error otherwise.
pub fn ensure_address(nl: &mut Netlink, bridge: &Link, gw: IpNet, force: bool) -> Result<(), CniError> {
    let family = IpFamily::of(gw.addr());
    let present = nl.addresses(Some(bridge.index), Some(family)).or_cni("list bridge addresses")?;
    for a in &present {
        if a.address == gw {
            return Ok(());
        }
        let conflicts =
            family == IpFamily::V4 || a.address.contains(&gw.addr()) || gw.contains(&a.address.addr());
        if conflicts && a.scope == 0 {
            if !force {
                return Err(CniError::internal(format!(
                    "{:?} already has an IP address different from {gw}",
                    bridge.name
                )));
            }
            nl.delete_address(bridge.index, a.address).or_cni("remove old bridge address")?;
        }
    }
    // No DAD on the gateway either: a tentative gateway would drop the first packets.
    let flags = if family == IpFamily::V6 { AddressFlags::Nodad } else { AddressFlags::empty() };
    nl.add_address(bridge.index, gw, flags)
        .ignore_exists()
        .map(drop)
        .map_err(|e| CniError::internal(format!("could not add {gw} to {}: {e}", bridge.name)))
}
