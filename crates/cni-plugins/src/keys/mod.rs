//! The configuration keys each plugin of this crate accepts: which of its serde types (and
//! at which path) each plugin parses its stdin into. The tracing itself, and the keys
//! every plugin shares, are [`cni_sdk::keys`]'. Used by `cnitool validate` (unknown keys,
//! with a did-you-mean) and by the test keeping `docs/plugins/` in step with the code.

use std::collections::BTreeSet;

pub use cni_sdk::keys::{capabilities, common_keys, config_keys, keys_at, keys_of, list_keys, Keys};

/// The MAC address sources `cni_sdk::args::requested_mac` reads (with CNI_ARGS `MAC`).
fn requested_mac() -> Vec<Keys> {
    vec![keys_at::<String>("runtimeConfig.mac"), keys_at::<String>("args.cni.mac")]
}

/// The address sources `cni_sdk::args::requested_ips` and static read (with CNI_ARGS `IP`).
fn requested_ips() -> Vec<Keys> {
    vec![keys_at::<Vec<String>>("runtimeConfig.ips"), keys_at::<Vec<String>>("args.cni.ips")]
}

/// The keys plugin `name`'s code parses its stdin into, beyond the [`common_keys`];
/// `None` for a plugin that is not ours.
pub fn plugin_keys(name: &str) -> Option<Keys> {
    use crate::{interface as i, ipam, meta as m};
    let parts = match name {
        "bandwidth" => vec![
            config_keys::<m::bandwidth::config::Entry>(),
            keys_at::<m::bandwidth::config::Entry>("runtimeConfig.bandwidth"),
        ],
        "bridge" => [vec![config_keys::<i::bridge::config::BridgeConf>()], requested_mac()].concat(),
        "dnsname" => vec![
            config_keys::<m::dnsname::config::RawConf>(),
            keys_at::<serde_json::Value>("runtimeConfig.aliases"),
        ],
        "dummy" | "loopback" => vec![],
        "firewall" => vec![config_keys::<m::firewall::config::RawConf>()],
        "host-device" => vec![
            config_keys::<i::host_device::select::HostDeviceConf>(),
            keys_at::<String>("runtimeConfig.deviceID"),
        ],
        "host-local" => vec![config_keys::<ipam::host_local::config::RawConf>()],
        "ipvlan" => vec![config_keys::<i::ipvlan::IpvlanConf>()],
        "macvlan" => [vec![config_keys::<i::macvlan::RawConf>()], requested_mac()].concat(),
        "portmap" => vec![config_keys::<m::portmap::config::RawConf>()],
        "ptp" => vec![config_keys::<i::ptp::PtpConf>()],
        "sbr" => vec![config_keys::<m::sbr::SbrConf>()],
        "slaac" => vec![config_keys::<ipam::slaac::config::RawConf>()],
        "static" => [vec![config_keys::<ipam::static_ipam::RawConf>()], requested_ips()].concat(),
        "tap" => [vec![config_keys::<i::tap::RawConf>()], requested_mac()].concat(),
        "tuning" => [
            vec![
                config_keys::<m::tuning::config::RawConf>(),
                keys_at::<m::tuning::config::Overrides>("args.cni"),
            ],
            requested_mac(),
        ]
        .concat(),
        "vlan" => vec![config_keys::<i::vlan::VlanConf>()],
        "vrf" => vec![config_keys::<m::vrf::VrfConf>()],
        _ => return None,
    };
    Some(keys_of(parts))
}

/// The capabilities plugin `name` reads (see [`capabilities`]); `None` for a plugin that
/// is not ours.
pub fn plugin_capabilities(name: &str) -> Option<BTreeSet<String>> {
    plugin_keys(name).map(|keys| capabilities(&keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_plugin_has_keys() {
        for entry in crate::registry::plugins() {
            assert!(plugin_keys(entry.name).is_some(), "{}", entry.name);
        }
        assert!(plugin_keys("whereabouts").is_none());
    }

    #[test]
    fn capabilities_come_from_runtime_config_keys() {
        let portmap = plugin_capabilities("portmap").unwrap();
        assert!(portmap.contains("portMappings"), "{portmap:?}");
        assert!(plugin_capabilities("bandwidth").unwrap().contains("bandwidth"));
        assert!(plugin_capabilities("bridge").unwrap().contains("mac"));
        assert!(plugin_capabilities("loopback").unwrap().is_empty());
    }
}
