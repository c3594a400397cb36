//! Every plugin of the multi-call binary, one entry each: the name a runtime calls it by,
//! how to make it, its dry configuration stage (parsing and validation before anything is
//! touched, for `cnitool validate` and the fuzzer; an interface plugin's built-in IPAM
//! stage runs through the catalog), the keys its code reads (for `cnitool validate` and the
//! docs drift test) and whether it is chained. Adding a plugin is one entry here.

pub use cni_sdk::catalog::{Catalog, Entry};

use crate::interface::{bridge, dummy, host_device, ipvlan, loopback, macvlan, ptp, tap, vlan};
use crate::ipam::{host_local, slaac, static_ipam};
use crate::keys::{config_keys, keys_at, keys_of, requested_ips, requested_mac};
use crate::meta::{bandwidth, dnsname, firewall, portmap, sbr, tuning, vrf};

/// The one table below, compiled twice: [`plugins`], names and constructors, is all the
/// multi-call binary links (every plugin exec maps it); [`catalog`] adds each plugin's dry
/// stage, key lists and chaining for the tools (`cnitool validate`, the fuzzer, the docs
/// drift test). One table in the source, so a plugin is still one entry; two in the
/// binary, so the key-tracing code (about 160 KiB) stays out of every plugin exec.
macro_rules! registry {
    ($($name:literal { make: $make:expr, config_stage: $stage:expr, keys: $keys:expr, chained: $chained:expr $(,)? }),* $(,)?) => {
        /// Every plugin, in the order `--list` prints them: the name a runtime calls it by
        /// and how to make it.
        pub fn plugins() -> &'static [Plugin] {
            &[$(Plugin { name: $name, make: $make }),*]
        }

        /// Every plugin's full record, for tools that look at configurations.
        pub fn catalog() -> &'static [Entry] {
            &[$(Entry { name: $name, make: $make, config_stage: $stage, keys: $keys, chained: $chained }),*]
        }
    };
}

/// A plugin as the multi-call binary knows it.
pub struct Plugin {
    pub name: &'static str,
    pub make: fn() -> Box<dyn cni_sdk::Plugin>,
}

registry! {
    "bandwidth" {
        make: || Box::new(bandwidth::Bandwidth),
        config_stage: |req| bandwidth::config::load(req).map(drop),
        keys: || {
            keys_of(vec![
                config_keys::<bandwidth::config::Entry>(),
                keys_at::<bandwidth::config::Entry>("runtimeConfig.bandwidth"),
            ])
        },
        chained: true,
    },
    "bridge" {
        make: || Box::new(bridge::Bridge),
        config_stage: |req| bridge::BridgeConf::load(req).map(drop),
        keys: || keys_of([vec![config_keys::<bridge::config::BridgeConf>()], requested_mac()].concat()),
        chained: false,
    },
    "dnsname" {
        make: || Box::new(dnsname::Dnsname),
        config_stage: dnsname::config_stage,
        keys: || {
            keys_of(vec![
                config_keys::<dnsname::config::RawConf>(),
                keys_at::<serde_json::Value>("runtimeConfig.aliases"),
            ])
        },
        chained: true,
    },
    "dummy" {
        make: || Box::new(dummy::Dummy),
        config_stage: dummy::require_ipam,
        keys: || keys_of(vec![]),
        chained: false,
    },
    "firewall" {
        make: || Box::new(firewall::Firewall),
        config_stage: |req| firewall::config::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<firewall::config::RawConf>()]),
        chained: true,
    },
    "host-device" {
        make: || Box::new(host_device::HostDevice),
        config_stage: |req| host_device::HostDeviceConf::load(req).map(drop),
        keys: || {
            keys_of(vec![
                config_keys::<host_device::select::HostDeviceConf>(),
                keys_at::<String>("runtimeConfig.deviceID"),
            ])
        },
        chained: false,
    },
    "host-local" {
        make: || Box::new(host_local::HostLocal),
        config_stage: |req| host_local::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<host_local::config::RawConf>()]),
        chained: false,
    },
    "ipvlan" {
        make: || Box::new(ipvlan::Ipvlan),
        config_stage: |req| ipvlan::IpvlanConf::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<ipvlan::IpvlanConf>()]),
        chained: false,
    },
    "loopback" {
        make: || Box::new(loopback::Loopback),
        config_stage: |_| Ok(()),
        keys: || keys_of(vec![]),
        chained: false,
    },
    "macvlan" {
        make: || Box::new(macvlan::Macvlan),
        config_stage: |req| macvlan::MacvlanConf::load(req).map(drop),
        keys: || keys_of([vec![config_keys::<macvlan::RawConf>()], requested_mac()].concat()),
        chained: false,
    },
    "portmap" {
        make: || Box::new(portmap::Portmap),
        config_stage: |req| portmap::config::PortmapConf::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<portmap::config::RawConf>()]),
        chained: true,
    },
    "ptp" {
        make: || Box::new(ptp::Ptp),
        config_stage: |req| ptp::PtpConf::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<ptp::PtpConf>()]),
        chained: false,
    },
    "sbr" {
        make: || Box::new(sbr::Sbr),
        config_stage: |req| sbr::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<sbr::SbrConf>()]),
        chained: true,
    },
    "slaac" {
        make: || Box::new(slaac::Slaac),
        config_stage: |req| slaac::config::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<slaac::config::RawConf>()]),
        chained: false,
    },
    "static" {
        make: || Box::new(static_ipam::StaticIpam),
        config_stage: |req| static_ipam::StaticIpam::load(req).map(drop),
        keys: || keys_of([vec![config_keys::<static_ipam::RawConf>()], requested_ips()].concat()),
        chained: false,
    },
    "tap" {
        make: || Box::new(tap::Tap),
        config_stage: |req| tap::TapConf::load(req).map(drop),
        keys: || keys_of([vec![config_keys::<tap::RawConf>()], requested_mac()].concat()),
        chained: false,
    },
    "tuning" {
        make: || Box::new(tuning::Tuning),
        config_stage: |req| tuning::config::load(req).map(drop),
        keys: || {
            let own = vec![
                config_keys::<tuning::config::RawConf>(),
                keys_at::<tuning::config::Overrides>("args.cni"),
            ];
            keys_of([own, requested_mac()].concat())
        },
        chained: true,
    },
    "vlan" {
        make: || Box::new(vlan::Vlan),
        config_stage: |req| vlan::VlanConf::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<vlan::VlanConf>()]),
        chained: false,
    },
    "vrf" {
        make: || Box::new(vrf::Vrf),
        config_stage: |req| vrf::load(req).map(drop),
        keys: || keys_of(vec![config_keys::<vrf::VrfConf>()]),
        chained: true,
    },
}

pub fn find(name: &str) -> Option<&'static Plugin> {
    plugins().iter().find(|e| e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_in_order() {
        let names: Vec<&str> = plugins().iter().map(|e| e.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "one entry per name, in name order");
    }

    #[test]
    fn meta_plugins_are_chained_and_interface_and_ipam_plugins_are_not() {
        let chained = |name: &str| catalog().iter().find(|e| e.name == name).unwrap().chained;
        assert!(["bandwidth", "firewall", "portmap", "tuning"].into_iter().all(chained));
        assert!(!["bridge", "host-local", "loopback"].into_iter().any(chained));
    }

    #[test]
    fn the_binary_and_the_catalog_list_the_same_plugins() {
        let names = |list: Vec<&'static str>| list;
        assert_eq!(
            names(plugins().iter().map(|p| p.name).collect()),
            names(catalog().iter().map(|e| e.name).collect())
        );
    }
}
