//! The gateway of an access VLAN. With `isGateway` and `vlan`, the gateway addresses go on
//! `<bridge>.<vlan>` (the reference's name), an 802.1Q link on the bridge, and the bridge
//! itself ("self") carries that VLAN tagged, so the link sends and receives the VLAN's
//! frames.
//!
//! Unlike the reference, which leaves it behind for ever, the link goes when the last port
//! on its VLAN does. "Last" is read from the kernel (no bridge port carries the VLAN any
//! more; DEL strips its departing port first, see [`super::vlan::retire_port`]), under an
//! exclusive lock, so that an ADD joining the VLAN and a DEL leaving it cannot interleave
//! a deletion with a new user: ADD gives its port the VLAN before it takes the lock, DEL
//! checks the ports and deletes under it. A DEL that can find the departing port neither
//! through the container (its namespace already gone) nor in prevResult may see it still
//! lingering and keep the gateway; the next DEL on that VLAN, or GC, removes it.

use super::gateway;
use super::vlan::vlan_has_ports;
use super::vlan_plan::gateway_link_name;
use crate::common::{iface, NetResultExt};
use cni_net::netlink::{BridgeVlan, LinkKind, LinkSpec, VlanTarget};
use cni_net::{Idempotent, Link, Netlink};
use cni_sdk::{CniError, CniResult};
use ipnet::IpNet;
use std::fs::File;

/// An exclusive lock on this network namespace's nsfs inode: every VLAN-gateway change in
/// the namespace is serialised, with no file to create or leave behind. Released on drop.
struct NamespaceLock {
    _file: File,
}

fn lock() -> Result<NamespaceLock, CniError> {
    const PATH: &str = "/proc/thread-self/ns/net";
    let file = File::open(PATH).map_err(|e| CniError::internal(format!("open {PATH} to lock it: {e}")))?;
    cni_os::lock::exclusive(&file).map_err(|e| CniError::internal(format!("lock {PATH}: {e}")))?;
    Ok(NamespaceLock { _file: file })
}

/// Whether `link` is the gateway link this plugin makes for `vid` on `bridge`.
fn is_ours(nl: &mut Netlink, link: &Link, bridge: &Link, vid: u16) -> Result<bool, CniError> {
    if link.kind != LinkKind::Vlan || link.link != Some(bridge.index) {
        return Ok(false);
    }
    Ok(nl.vlan_link_id(link.index).or_cni("read VLAN id")? == Some(vid))
}

/// ADD: the gateway link of `vid`, created if missing, up, with `addresses`.
pub fn ensure(
    nl: &mut Netlink,
    bridge: &Link,
    vid: u16,
    addresses: &[IpNet],
    force_address: bool,
) -> Result<Link, CniError> {
    let _lock = lock()?;
    nl.add_bridge_vlans(VlanTarget::Bridge(bridge.index), &[BridgeVlan::tagged(vid)])
        .or_cni(&format!("let bridge {} carry VLAN {vid}", bridge.name))?;
    let name = gateway_link_name(&bridge.name, vid);
    let link = match nl.link_by_name(&name).or_cni("look up the VLAN gateway")? {
        Some(link) => link,
        None => {
            nl.add_vlan(&LinkSpec::new(name.clone()), bridge.index, vid)
                .map_err(|e| CniError::internal(format!("could not create VLAN gateway {name}: {e}")))?;
            iface::skip_link_local_dad(&name)?;
            iface::refuse_router_advertisements(&name)?;
            nl.require_link(&name).or_cni("look up the VLAN gateway")?
        }
    };
    if !is_ours(nl, &link, bridge, vid)? {
        return Err(CniError::internal(format!(
            "{name} already exists but is not VLAN {vid} of bridge {}",
            bridge.name
        )));
    }
    if !link.up {
        nl.set_link_up(link.index).or_cni(&format!("set {name} up"))?;
    }
    for gw in addresses {
        gateway::ensure_address(nl, &link, *gw, force_address)?;
    }
    Ok(link)
}

/// DEL (and a failed ADD, and GC): removes the gateway link of `vid` and the VLAN from the
/// bridge itself when no port of the bridge carries `vid` any more.
pub fn release_if_unused(nl: &mut Netlink, bridge_name: &str, vid: u16) -> Result<(), CniError> {
    let _lock = lock()?;
    let bridge = nl.link_by_name(bridge_name).or_cni("look up bridge")?;
    let Some(bridge) = bridge.filter(|b| b.kind == LinkKind::Bridge) else { return Ok(()) };
    let ports = nl.bridge_port_vlans().or_cni("list bridge port VLANs")?;
    if vlan_has_ports(&ports, bridge.index, vid) {
        return Ok(());
    }
    let name = gateway_link_name(bridge_name, vid);
    if let Some(link) = nl.link_by_name(&name).or_cni("look up the VLAN gateway")? {
        if is_ours(nl, &link, &bridge, vid)? {
            nl.delete_link(link.index).ignore_missing().or_cni(&format!("delete VLAN gateway {name}"))?;
        }
    }
    let bridge_carries = ports.iter().any(|p| p.index == bridge.index && p.carries(vid));
    if bridge_carries {
        nl.delete_bridge_vlans(VlanTarget::Bridge(bridge.index), &[BridgeVlan::tagged(vid)])
            .ignore_missing()
            .or_cni(&format!("remove VLAN {vid} from bridge {bridge_name}"))?;
    }
    Ok(())
}

/// CHECK: the gateway link is there, ours, and carries the gateways of `prev`'s addresses.
pub fn check(nl: &mut Netlink, bridge: &Link, vid: u16, prev: &CniResult) -> Result<(), CniError> {
    let name = gateway_link_name(&bridge.name, vid);
    let link = nl
        .link_by_name(&name)
        .or_cni("look up the VLAN gateway")?
        .ok_or_else(|| CniError::internal(format!("VLAN gateway {name} is missing")))?;
    if !is_ours(nl, &link, bridge, vid)? {
        return Err(CniError::internal(format!("{name} is not VLAN {vid} of bridge {}", bridge.name)));
    }
    let present = nl.addresses(Some(link.index), None).or_cni("list VLAN gateway addresses")?;
    for ip in &prev.ips {
        let Some(gw) = ip.gateway else { continue };
        let expected = IpNet::new(gw, ip.address.prefix_len())
            .map_err(|_| CniError::internal(format!("gateway {gw} does not fit address {}", ip.address)))?;
        if !present.iter().any(|a| a.address == expected) {
            return Err(CniError::internal(format!("VLAN gateway {name} lacks {expected}")));
        }
    }
    Ok(())
}
