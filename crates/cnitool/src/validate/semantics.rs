//! Mistakes every plugin accepts one by one but that fail at ADD: a host-local gateway
//! outside its subnet (the gateway is then no neighbour of the container, so its route
//! cannot be added), and a chained plugin with no interface plugin before it (it refuses
//! an ADD without prevResult, and nothing before it made one).

use cni_types::Version;
use serde_json::{Map, Value};
use std::net::IpAddr;

/// `(key path, message)` for every host-local range whose `gateway` is outside its
/// `subnet`: the legacy top-level pair and every `ranges[i][j]`. A subnet or gateway
/// that does not parse is left to the plugin's own config stage, which names it.
pub fn gateways_outside_subnets(plugin: &Map<String, Value>) -> Vec<(String, String)> {
    let Some(ipam) = plugin.get("ipam").and_then(Value::as_object) else { return Vec::new() };
    if ipam.get("type").and_then(Value::as_str) != Some("host-local") {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut check = |range: &Map<String, Value>, prefix: &str| {
        if let Some(message) = gateway_outside(range) {
            found.push((format!("{prefix}gateway"), message));
        }
    };
    check(ipam, "ipam.");
    let sets = ipam.get("ranges").and_then(Value::as_array).into_iter().flatten().enumerate();
    for (i, set) in sets {
        for (j, range) in set.as_array().into_iter().flatten().enumerate() {
            if let Some(range) = range.as_object() {
                check(range, &format!("ipam.ranges[{i}][{j}]."));
            }
        }
    }
    found
}

fn gateway_outside(range: &Map<String, Value>) -> Option<String> {
    let subnet = range.get("subnet")?.as_str()?;
    let gateway = range.get("gateway")?.as_str()?;
    let (network, prefix) = parse_cidr(subnet)?;
    let address: IpAddr = gateway.trim().parse().ok()?;
    (!contains(network, prefix, address)).then(|| {
        format!("gateway {gateway} is not in subnet {subnet}: the container's route via it would fail")
    })
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, prefix) = text.trim().split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some((address, prefix))
}

/// Whether `address` is in `network/prefix` (host bits of `network` ignored, as
/// host-local masks them).
fn contains(network: IpAddr, prefix: u8, address: IpAddr) -> bool {
    let bits = |ip: IpAddr| -> (u128, u32) {
        match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        }
    };
    let ((net, net_len), (addr, addr_len)) = (bits(network), bits(address));
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    net_len == addr_len && net & mask == addr & mask
}

/// The index of every plugin that needs a prevResult (`is_chained`) but has no plugin
/// before it that could have made an interface: only other chained plugins, or none.
/// A plugin that is not ours may make interfaces, so it counts as one. Before 0.3.0 there
/// is no prevResult to chain, and chained plugins describe the interface themselves.
pub fn chained_without_interface(
    types: &[&str],
    version: Version,
    is_chained: impl Fn(&str) -> bool,
) -> Vec<usize> {
    if version < Version::V0_3_0 {
        return Vec::new();
    }
    let first_maker = types.iter().position(|t| !is_chained(t)).unwrap_or(types.len());
    (0..first_maker).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateways(plugin: Value) -> Vec<(String, String)> {
        gateways_outside_subnets(plugin.as_object().unwrap())
    }

    #[test]
    fn gateway_outside_the_subnet_is_found_in_both_forms() {
        let found = gateways(json!({"type": "bridge", "ipam": {"type": "host-local",
            "subnet": "10.1.0.0/16", "gateway": "10.2.0.1",
            "ranges": [[{"subnet": "10.3.0.0/24", "gateway": "10.3.0.254"}, {"subnet": "fd00::/64", "gateway": "fd01::1"}]]}}));
        let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["ipam.gateway", "ipam.ranges[0][1].gateway"]);
        assert!(found[0].1.contains("10.2.0.1") && found[0].1.contains("10.1.0.0/16"), "{found:?}");
    }

    #[test]
    fn gateways_inside_unparsable_or_foreign_ipam_are_left_alone() {
        for plugin in [
            json!({"ipam": {"type": "host-local", "subnet": "10.1.0.5/16", "gateway": "10.1.255.254"}}),
            json!({"ipam": {"type": "host-local", "subnet": "10.1.0.0/16"}}),
            json!({"ipam": {"type": "host-local", "subnet": "10.1.0.0/99", "gateway": "10.2.0.1"}}),
            json!({"ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "fd00::1"}}),
            json!({"ipam": {"type": "static", "subnet": "10.1.0.0/16", "gateway": "10.2.0.1"}}),
            json!({"ipam": {"type": "host-local", "subnet": "0.0.0.0/0", "gateway": "10.2.0.1"}}),
        ] {
            let found = gateways(plugin.clone());
            // A v6 gateway in a v4 subnet is outside it too.
            let v6_in_v4 = plugin["ipam"]["gateway"] == "fd00::1";
            assert_eq!(found.len(), usize::from(v6_in_v4), "{plugin}: {found:?}");
        }
    }

    #[test]
    fn chained_plugins_need_an_interface_plugin_before_them() {
        let chained = |t: &str| ["tuning", "portmap", "firewall"].contains(&t);
        let v = Version::V1_0_0;
        assert_eq!(chained_without_interface(&["tuning", "portmap", "bridge"], v, chained), [0, 1]);
        assert_eq!(chained_without_interface(&["bridge", "tuning"], v, chained), Vec::<usize>::new());
        assert_eq!(chained_without_interface(&["calico", "tuning"], v, chained), Vec::<usize>::new());
        assert_eq!(chained_without_interface(&["tuning"], Version::V0_2_0, chained), Vec::<usize>::new());
    }
}
