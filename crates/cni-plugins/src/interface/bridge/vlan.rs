//! The bridge's VLANs in the kernel: filtering on the bridge, the port's VLANs at ADD,
//! their check and their removal at DEL (the keys themselves are read in `vlan_plan`).
//!
//! Any VLAN key switches VLAN filtering on the bridge (without it the kernel forwards every
//! frame whatever its tag). `vlan` and `vlanTrunk` may be combined when they do not
//! overlap: the port is then untagged on `vlan` and tagged on the trunk.

use super::config::BridgeConf;
use super::vlan_plan::PortPlan;
use crate::common::{open_container_netns_for_del, NetResultExt};
use cni_net::netlink::{BridgeOptions, BridgeVlan, BridgeVlanSettings, PortVlans, VlanTarget};
use cni_net::{Idempotent, Link, Netlink};
use cni_sdk::{CniError, Request};

/// The options a bridge this plugin creates gets: filtering from the start when VLANs are
/// used (a kernel without it then refuses the bridge itself, leaving nothing behind).
pub fn bridge_options(plan: &PortPlan) -> BridgeOptions {
    BridgeOptions { vlan_filtering: plan.in_use().then_some(true), ..Default::default() }
}

/// The error for a kernel that cannot filter by VLAN, or any other refusal.
pub fn filtering_error(bridge: &str, err: &cni_net::Error) -> CniError {
    if err.errno() == Some(libc::EOPNOTSUPP) {
        return CniError::internal(format!(
            "vlan/vlanTrunk need VLAN filtering on bridge {bridge:?}, which this kernel does not support \
             (CONFIG_BRIDGE_VLAN_FILTERING): {err}"
        ));
    }
    CniError::internal(format!("could not switch VLAN filtering on for bridge {bridge:?}: {err}"))
}

/// Switches filtering on for an existing bridge that has it off; returns its settings.
pub fn ensure_filtering(nl: &mut Netlink, bridge: &Link) -> Result<BridgeVlanSettings, CniError> {
    let mut settings = nl
        .bridge_vlan_settings(bridge.index)
        .or_cni("read bridge VLAN settings")?
        .ok_or_else(|| CniError::internal(format!("{:?} is not a bridge", bridge.name)))?;
    if !settings.filtering {
        nl.set_bridge_vlan_filtering(bridge.index, true).map_err(|e| filtering_error(&bridge.name, &e))?;
        settings.filtering = true;
    }
    Ok(settings)
}

/// Gives the new port its VLANs: the bridge's default PVID goes unless kept, then the
/// access VLAN and the trunk.
pub fn configure_port(
    nl: &mut Netlink,
    port: &Link,
    plan: &PortPlan,
    settings: &BridgeVlanSettings,
) -> Result<(), CniError> {
    let target = VlanTarget::Port(port.index);
    if !plan.preserve_default && settings.default_pvid != 0 {
        nl.delete_bridge_vlans(target, &[BridgeVlan::tagged(settings.default_pvid)])
            .ignore_missing()
            .map(drop)
            .map_err(|e| {
                CniError::internal(format!("could not remove the default VLAN from {}: {e}", port.name))
            })?;
    }
    nl.add_bridge_vlans(target, &plan.port_vlans())
        .map_err(|e| CniError::internal(format!("could not set the VLANs of {}: {e}", port.name)))
}

/// The VLANs a port carries now (none when it is on no filtering bridge).
pub fn port_vlans(nl: &mut Netlink, index: u32) -> Result<Vec<BridgeVlan>, CniError> {
    let ports = nl.bridge_port_vlans().or_cni("list bridge port VLANs")?;
    Ok(ports.into_iter().find(|p| p.index == index).map(|p| p.vlans).unwrap_or_default())
}

/// Each VLAN id with its flags, for comparing lists however the kernel grouped them.
fn expand(vlans: &[BridgeVlan]) -> Vec<(u16, bool, bool)> {
    let mut ids: Vec<_> =
        vlans.iter().flat_map(|v| (v.first..=v.last).map(|id| (id, v.pvid, v.untagged))).collect();
    ids.sort_unstable();
    ids
}

/// CHECK: the bridge filters by VLAN and the port carries exactly the planned VLANs (plus
/// the bridge's default PVID, untagged, when it is preserved).
pub fn check_port(nl: &mut Netlink, bridge: &Link, port: &Link, plan: &PortPlan) -> Result<(), CniError> {
    let settings =
        nl.bridge_vlan_settings(bridge.index).or_cni("read bridge VLAN settings")?.unwrap_or_default();
    if !settings.filtering {
        return Err(CniError::internal(format!("bridge {} does not filter by VLAN", bridge.name)));
    }
    let mut expected = plan.port_vlans();
    let actual = port_vlans(nl, port.index)?;
    let default = settings.default_pvid;
    if plan.preserve_default && default != 0 && !expected.iter().any(|v| v.contains(default)) {
        // The default VLAN stays untagged, and stays the PVID unless `vlan` took it.
        expected.push(BridgeVlan { pvid: plan.access == 0, ..BridgeVlan::access(default) });
    }
    if expand(&expected) != expand(&actual) {
        return Err(CniError::internal(format!(
            "{} carries VLANs {actual:?}, expected {expected:?}",
            port.name
        )));
    }
    Ok(())
}

/// DEL, before the pair goes: strips the departing host port of its VLANs, so that a
/// VLAN's "last port" is known at once (the pair itself is deleted in the background).
/// The port is found from the container's end (its peer), or by `prev_host_port` (the
/// host interface prevResult names) when the container is gone.
pub fn retire_port(req: &Request, conf: &BridgeConf, prev_host_port: Option<&str>) -> Result<(), CniError> {
    let mut host = Netlink::new().or_cni("open netlink")?;
    let Some(bridge) = host.link_by_name(&conf.bridge).or_cni("look up bridge")? else { return Ok(()) };
    let mut port = None;
    if let Some(ns) = open_container_netns_for_del(req)? {
        let mut cont = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        if let Some(peer) =
            cont.link_by_name(&req.ifname).or_cni("look up container interface")?.and_then(|l| l.link)
        {
            port = host.link_by_index(peer).or_cni("look up the host end")?;
        }
    }
    if port.is_none() {
        if let Some(name) = prev_host_port {
            port = host.link_by_name(name).or_cni("look up the host end")?;
        }
    }
    let Some(port) = port.filter(|p| p.master == Some(bridge.index)) else { return Ok(()) };
    let vlans = port_vlans(&mut host, port.index)?;
    if vlans.is_empty() {
        return Ok(());
    }
    host.delete_bridge_vlans(VlanTarget::Port(port.index), &vlans)
        .ignore_missing()
        .map(drop)
        .map_err(|e| CniError::internal(format!("could not remove the VLANs of {}: {e}", port.name)))
}

/// Whether any port of `bridge` other than the bridge itself carries `vid`.
pub fn vlan_has_ports(ports: &[PortVlans], bridge: u32, vid: u16) -> bool {
    ports.iter().any(|p| p.index != bridge && p.master == Some(bridge) && p.carries(vid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_port_ignores_the_bridge_itself_and_other_bridges() {
        let port = |index, master, vlans: Vec<BridgeVlan>| PortVlans { index, master: Some(master), vlans };
        let ports = vec![
            port(1, 1, vec![BridgeVlan::tagged(100)]),
            port(5, 2, vec![BridgeVlan::access(100)]),
            port(6, 1, vec![BridgeVlan::tagged_range(90, 99)]),
        ];
        assert!(!vlan_has_ports(&ports, 1, 100));
        assert!(vlan_has_ports(&ports, 1, 95));
        assert!(vlan_has_ports(&ports, 2, 100));
    }
}
