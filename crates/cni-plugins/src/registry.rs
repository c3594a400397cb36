//! The table of plugins the multi-call binary knows, by the name a runtime calls them.

use cni_sdk::Plugin;

/// A plugin's name (its `type` in a configuration) and how to make it.
pub struct Entry {
    pub name: &'static str,
    pub make: fn() -> Box<dyn Plugin>,
}

/// Every plugin, in the order `--list` prints them.
pub fn plugins() -> &'static [Entry] {
    &[
        Entry { name: "bandwidth", make: || Box::new(crate::meta::bandwidth::Bandwidth) },
        Entry { name: "bridge", make: || Box::new(crate::interface::bridge::Bridge) },
        Entry { name: "dnsname", make: || Box::new(crate::meta::dnsname::Dnsname) },
        Entry { name: "dummy", make: || Box::new(crate::interface::dummy::Dummy) },
        Entry { name: "firewall", make: || Box::new(crate::meta::firewall::Firewall) },
        Entry { name: "host-device", make: || Box::new(crate::interface::host_device::HostDevice) },
        Entry { name: "host-local", make: || Box::new(crate::ipam::host_local::HostLocal) },
        Entry { name: "ipvlan", make: || Box::new(crate::interface::ipvlan::Ipvlan) },
        Entry { name: "loopback", make: || Box::new(crate::interface::loopback::Loopback) },
        Entry { name: "macvlan", make: || Box::new(crate::interface::macvlan::Macvlan) },
        Entry { name: "portmap", make: || Box::new(crate::meta::portmap::Portmap) },
        Entry { name: "ptp", make: || Box::new(crate::interface::ptp::Ptp) },
        Entry { name: "sbr", make: || Box::new(crate::meta::sbr::Sbr) },
        Entry { name: "slaac", make: || Box::new(crate::ipam::slaac::Slaac) },
        Entry { name: "static", make: || Box::new(crate::ipam::static_ipam::StaticIpam) },
        Entry { name: "tap", make: || Box::new(crate::interface::tap::Tap) },
        Entry { name: "tuning", make: || Box::new(crate::meta::tuning::Tuning) },
        Entry { name: "vlan", make: || Box::new(crate::interface::vlan::Vlan) },
        Entry { name: "vrf", make: || Box::new(crate::meta::vrf::Vrf) },
    ]
}

pub fn find(name: &str) -> Option<&'static Entry> {
    plugins().iter().find(|e| e.name == name)
}

/// The chained plugins (`src/meta/`): they act on an interface plugin's result and refuse
/// an ADD without prevResult from 0.3.0 on, so a list must not start with them.
const CHAINED: &[&str] = &["bandwidth", "dnsname", "firewall", "portmap", "sbr", "tuning", "vrf"];

/// Whether plugin `name` is one of ours that needs a prevResult (see [`CHAINED`]).
pub fn is_chained(name: &str) -> bool {
    CHAINED.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chained_plugin_is_registered_and_no_interface_plugin_is_chained() {
        assert!(CHAINED.iter().all(|name| find(name).is_some()), "{CHAINED:?}");
        assert!(!is_chained("bridge") && !is_chained("host-local") && !is_chained("loopback"));
    }
}
