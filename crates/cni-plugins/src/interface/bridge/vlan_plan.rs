//! The bridge's VLAN keys as a plan: `vlan` (access port: PVID, untagged on the way out),
//! `vlanTrunk` (tagged VLANs, single ids and ranges) and `preserveDefaultVlan` (keep the
//! bridge's default PVID on the port; off by default, for complete isolation), checked
//! and reduced to what a port gets; and the name of an access VLAN's gateway link.
//!
//! The bottom layer of the bridge plugin: it knows no other module of the plugin and does
//! no kernel work, so the configuration (`config`) and the kernel steps (`vlan`,
//! `vlan_gateway`) can all build on it.

use cni_net::netlink::{BridgeVlan, MAX_VLAN_ID};
use cni_sdk::CniError;
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
    /// The plan of the keys `vlan`, `vlanTrunk` and `preserveDefaultVlan`.
    pub fn new(vlan: i64, trunk: &[TrunkEntry], preserve_default: bool) -> Result<PortPlan, CniError> {
        let access = match vlan {
            0 => 0,
            v => vlan_id("vlan", v).map_err(|_| {
                CniError::invalid_config(format!(
                    "invalid vlan {v}: must be 0 (none) or between 1 and {MAX_VLAN_ID}"
                ))
            })?,
        };
        let trunk = trunk_ranges(trunk)?;
        if let Some(&(first, last)) = trunk.iter().find(|(first, last)| (*first..=*last).contains(&access)) {
            return Err(CniError::invalid_config(format!(
                "invalid vlanTrunk: {first}-{last} overlaps vlan {access} (a VLAN is either untagged on the port or \
                 tagged, not both)"
            )));
        }
        Ok(PortPlan { access, trunk, preserve_default })
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

/// The gateway link of access VLAN `vid`: `<bridge>.<vlan>` (the reference's name).
pub fn gateway_link_name(bridge: &str, vid: u16) -> String {
    format!("{bridge}.{vid}")
}

/// The gateway link's name must be a valid interface name (15 bytes at most): a long
/// bridge name leaves no room for the VLAN.
pub fn validate_gateway_link_name(bridge: &str, vid: u16) -> Result<(), CniError> {
    let name = gateway_link_name(bridge, vid);
    if name.len() >= libc::IFNAMSIZ {
        return Err(CniError::invalid_config(format!(
            "bridge name {bridge:?} is too long for the VLAN gateway interface {name:?} (isGateway with vlan): at \
             most {} bytes",
            libc::IFNAMSIZ - 1
        )));
    }
    Ok(())
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
}
