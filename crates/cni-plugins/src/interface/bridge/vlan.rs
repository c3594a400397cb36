//! The bridge's VLAN keys: `vlan` (access port: PVID, untagged on the way out),
//! `vlanTrunk` (tagged VLANs, single ids and ranges) and `preserveDefaultVlan` (keep the
//! bridge's default PVID on the port; off by default, for complete isolation).
//!
//! Any of them switches VLAN filtering on the bridge (without it the kernel forwards every
//! frame whatever its tag). `vlan` and `vlanTrunk` may be combined when they do not
//! overlap: the port is then untagged on `vlan` and tagged on the trunk.

use super::config::BridgeConf;
use crate::common::{open_container_netns_for_del, NetResultExt};
use cni_net::netlink::{BridgeOptions, BridgeVlan, BridgeVlanSettings, PortVlans, VlanTarget, MAX_VLAN_ID};
use cni_net::{Idempotent, Link, Netlink};
use cni_sdk::{CniError, CniResult, Request};
use serde::Deserialize;

/// One `vlanTrunk` entry: `{"id": N}`, `{"minID": A, "maxID": B}`, or both.
#[derive(Debug, Clone, Deserialize)]
pub struct TrunkEntry {
    #[serde(default)]
    pub id: Option<i64>,
    #[serde(default, rename = "minID")]
    pub min_id: Option<i64>,
    #[serde(default, rename = "maxID")]
    pub max_id: Option<i64>,
}

/// Checks a VLAN id of `key` (1-4094).
fn vlan_id(key: &str, value: i64) -> Result<u16, CniError> {
    match u16::try_from(value) {
        Ok(id) if (1..=MAX_VLAN_ID).contains(&id) => Ok(id),
        _ => Err(CniError::invalid_config(format!(
            "invalid {key} {value}: must be between 1 and {MAX_VLAN_ID}"
        ))),
    }
}

/// The trunk as sorted, merged runs of tagged VLANs.
pub fn trunk_ranges(entries: &[TrunkEntry]) -> Result<Vec<(u16, u16)>, CniError> {
    let mut ranges = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let key = |field: &str| format!("vlanTrunk[{i}].{field}");
        match (entry.min_id, entry.max_id) {
            (Some(min), Some(max)) => {
                let (min, max) = (vlan_id(&key("minID"), min)?, vlan_id(&key("maxID"), max)?);
                if min > max {
                    return Err(CniError::invalid_config(format!(
                        "invalid vlanTrunk[{i}]: minID {min} is greater than maxID {max}"
                    )));
                }
                ranges.push((min, max));
            }
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err(CniError::invalid_config(format!(
                    "invalid vlanTrunk[{i}]: minID and maxID must be given together"
                )))
            }
        }
        match entry.id {
            Some(id) => {
                let id = vlan_id(&key("id"), id)?;
                ranges.push((id, id));
            }
            None if entry.min_id.is_none() => {
                return Err(CniError::invalid_config(format!(
                    "invalid vlanTrunk[{i}]: needs an id or a minID/maxID range"
                )))
            }
            None => {}
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match merged.last_mut() {
            Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    Ok(merged)
}

/// The VLAN part of the configuration, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortPlan {
    /// The access VLAN (`vlan`), 0 for none.
    pub access: u16,
    pub trunk: Vec<(u16, u16)>,
    pub preserve_default: bool,
}

impl PortPlan {
    pub fn from_conf(conf: &BridgeConf) -> Result<PortPlan, CniError> {
        let access = match conf.vlan {
            0 => 0,
            v => vlan_id("vlan", v).map_err(|_| {
                CniError::invalid_config(format!(
                    "invalid vlan {v}: must be 0 (none) or between 1 and {MAX_VLAN_ID}"
                ))
            })?,
        };
        let trunk = trunk_ranges(&conf.vlan_trunk)?;
        if let Some(&(first, last)) = trunk.iter().find(|(first, last)| (*first..=*last).contains(&access)) {
            return Err(CniError::invalid_config(format!(
                "invalid vlanTrunk: {first}-{last} overlaps vlan {access} (a VLAN is either untagged on the port or \
                 tagged, not both)"
            )));
        }
        Ok(PortPlan { access, trunk, preserve_default: conf.preserve_default_vlan })
    }

    /// Whether any VLAN key is in use (and so the bridge must filter by VLAN).
    pub fn in_use(&self) -> bool {
        self.access != 0 || !self.trunk.is_empty()
    }

    /// What the port gets.
    pub fn port_vlans(&self) -> Vec<BridgeVlan> {
        let access = (self.access != 0).then(|| BridgeVlan::access(self.access));
        access
            .into_iter()
            .chain(self.trunk.iter().map(|&(first, last)| BridgeVlan::tagged_range(first, last)))
            .collect()
    }
}

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
/// The port is found from the container's end (its peer), or from prevResult's host
/// interface when the container is gone.
pub fn retire_port(req: &Request, conf: &BridgeConf, prev: Option<&CniResult>) -> Result<(), CniError> {
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
        if let Some(name) = prev.and_then(|p| p.interfaces.get(super::HOST_IFACE)).map(|i| i.name.as_str()) {
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

    fn entries(json: serde_json::Value) -> Vec<TrunkEntry> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn trunk_entries_merge_into_sorted_runs() {
        let trunk = entries(serde_json::json!([
            {"id": 300}, {"minID": 100, "maxID": 110}, {"minID": 105, "maxID": 120}, {"id": 121}, {"id": 4094}
        ]));
        assert_eq!(trunk_ranges(&trunk).unwrap(), [(100, 121), (300, 300), (4094, 4094)]);
    }

    #[test]
    fn bad_trunk_entries_name_the_key() {
        for (bad, key) in [
            (serde_json::json!([{"id": 0}]), "vlanTrunk[0].id"),
            (serde_json::json!([{"id": 1}, {"id": 4095}]), "vlanTrunk[1].id"),
            (serde_json::json!([{"minID": -1, "maxID": 5}]), "vlanTrunk[0].minID"),
            (serde_json::json!([{"minID": 9, "maxID": 5}]), "minID 9 is greater than maxID 5"),
            (serde_json::json!([{"minID": 9}]), "minID and maxID"),
            (serde_json::json!([{}]), "needs an id"),
        ] {
            let err = trunk_ranges(&entries(bad.clone())).unwrap_err();
            assert_eq!(err.code, 7, "{bad}");
            assert!(err.msg.contains(key), "{bad}: {}", err.msg);
        }
    }

    #[test]
    fn port_vlans_put_access_first_then_trunk() {
        let plan = PortPlan { access: 10, trunk: vec![(20, 29), (40, 40)], preserve_default: false };
        assert_eq!(
            plan.port_vlans(),
            [BridgeVlan::access(10), BridgeVlan::tagged_range(20, 29), BridgeVlan::tagged(40)]
        );
        assert!(plan.in_use());
        assert!(!PortPlan::default().in_use());
    }

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
