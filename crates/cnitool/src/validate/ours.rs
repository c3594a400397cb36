//! What validate knows of cni-rs's own plugins. With the `plugin-checks` feature (on by
//! default) that is the key lists and dry configuration stages of cni-plugins' plugins and
//! of etcd-ipam and dhcp (binaries of their own); without it,
//! nothing: every plugin is treated as foreign (CNI_PATH and version checks only) and
//! cnitool links no plugin code.

pub use imp::*;

#[cfg(feature = "plugin-checks")]
mod imp {
    use cni_plugins::registry::Catalog;
    use cni_types::{CniError, Version};
    use serde_json::{Map, Value};
    use std::collections::BTreeSet;

    pub use cni_plugins::keys::Keys;

    /// Every plugin of cni-rs: the multi-call binary's, etcd-ipam's and dhcp's.
    fn catalog() -> Catalog {
        Catalog::new(&[cni_plugins::registry::catalog(), cni_etcd_ipam::catalog(), cni_dhcp::catalog()])
    }

    /// The keys plugin `plugin_type` reads beyond the common ones; `None`: not ours.
    pub fn plugin_keys(plugin_type: &str) -> Option<Keys> {
        catalog().find(plugin_type).map(|entry| (entry.keys)())
    }

    /// The keys every plugin object has (`cniVersion`, `name`, `type`, `ipam.type`, ...).
    pub fn common_keys() -> BTreeSet<String> {
        cni_plugins::keys::common_keys()
    }

    /// The keys of a conflist's top level.
    pub fn list_keys() -> Option<BTreeSet<String>> {
        Some(cni_plugins::keys::list_keys())
    }

    /// The capabilities plugin `plugin_type` reads; `None`: not ours.
    pub fn capabilities(plugin_type: &str) -> Option<BTreeSet<String>> {
        plugin_keys(plugin_type).map(|keys| cni_plugins::keys::capabilities(&keys))
    }

    /// Whether the plugin is ours and needs a prevResult (a chained, meta plugin).
    pub fn is_chained(plugin_type: &str) -> bool {
        catalog().find(plugin_type).is_some_and(|entry| entry.chained)
    }

    /// The plugin's own ADD validation, run dry; `None`: not ours.
    pub fn check_add(
        plugin_type: &str,
        conf: &Map<String, Value>,
        version: Version,
    ) -> Option<Result<(), CniError>> {
        cni_plugins::dry_run::check_add(&catalog(), plugin_type, conf, version)
    }
}

#[cfg(not(feature = "plugin-checks"))]
mod imp {
    use cni_types::{CniError, Version};
    use serde_json::{Map, Value};
    use std::collections::BTreeSet;

    /// The shape of cni-plugins' key lists (never made here).
    #[derive(Default)]
    pub struct Keys {
        pub keys: BTreeSet<String>,
        pub open: BTreeSet<String>,
    }

    pub fn plugin_keys(_: &str) -> Option<Keys> {
        None
    }

    pub fn common_keys() -> BTreeSet<String> {
        BTreeSet::new()
    }

    pub fn list_keys() -> Option<BTreeSet<String>> {
        None
    }

    pub fn capabilities(_: &str) -> Option<BTreeSet<String>> {
        None
    }

    pub fn is_chained(_: &str) -> bool {
        false
    }

    pub fn check_add(_: &str, _: &Map<String, Value>, _: Version) -> Option<Result<(), CniError>> {
        None
    }
}
