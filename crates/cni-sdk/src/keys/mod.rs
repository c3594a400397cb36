//! The configuration keys a plugin accepts, read from the serde types its code parses
//! stdin into — never a hand-written list: what `cnitool validate` checks keys against
//! (unknown keys, with a did-you-mean) and the drift tests keep `docs/plugins/` in step with.
//!
//! Keys are paths: `.` between an object and its key, `[]` for a list's elements
//! (`ipam.ranges[][].subnet`). A value the code parses out of a sub-object
//! (`runtimeConfig.bandwidth`, `args.cni`) is recorded at that path, mirroring the
//! `parse_value` call. A path in [`Keys::open`] is read as a map: any key below it is
//! accepted.

mod recording;

pub use recording::{config_keys, Keys};

use serde::de::DeserializeOwned;
use std::collections::BTreeSet;

/// `T`'s keys below `prefix`, which is itself a key (the code parses the value there).
pub fn keys_at<T: DeserializeOwned>(prefix: &str) -> Keys {
    let inner = config_keys::<T>();
    let join = |path: String| match path.as_str() {
        "" => prefix.to_string(),
        p if p.starts_with("[]") => format!("{prefix}{p}"),
        p => format!("{prefix}.{p}"),
    };
    let mut keys: BTreeSet<String> = inner.keys.into_iter().map(join).collect();
    keys.insert(prefix.to_string());
    Keys { keys, open: inner.open.into_iter().map(join).collect() }
}

/// The union of a plugin's key sources.
pub fn keys_of(parts: Vec<Keys>) -> Keys {
    let mut all = Keys::default();
    for part in parts {
        all.merge(part);
    }
    all
}

/// The capabilities a plugin with `keys` reads: the keys right below `runtimeConfig` (a
/// runtime passes a capability's arguments there, and only to a plugin that enables it).
pub fn capabilities(keys: &Keys) -> BTreeSet<String> {
    let below = |path: &String| path.strip_prefix("runtimeConfig.").map(|rest| rest.to_string());
    keys.keys
        .iter()
        .chain(&keys.open)
        .filter_map(below)
        .map(|rest| rest.split(['.', '[']).next().unwrap_or_default().to_string())
        .collect()
}

/// The keys every plugin's configuration has: the names `cni_types::NetConf` serialises
/// (its flattened catch-all hides them from the recording deserializer; the literal below stops
/// compiling when a field is added), with the `dns` object's keys and the `ipam` object's
/// own (`ipam.type`).
pub fn common_keys() -> BTreeSet<String> {
    let every_field = cni_types::NetConf {
        cni_version: "1.1.0".into(),
        name: "n".into(),
        plugin_type: "t".into(),
        capabilities: Some(Default::default()),
        ipam: Some(Default::default()),
        dns: Some(Default::default()),
        args: Some(serde_json::Value::Null),
        runtime_config: Some(Default::default()),
        prev_result: Some(serde_json::Value::Null),
        extra: Default::default(),
    };
    let serde_json::Value::Object(map) = serde_json::to_value(every_field).expect("NetConf serialises")
    else {
        unreachable!("a struct serialises to an object")
    };
    let mut keys: BTreeSet<String> = map.keys().cloned().collect();
    keys.extend(keys_at::<cni_types::Dns>("dns").keys);
    let ipam = cni_types::IpamConf { ipam_type: "t".into(), extra: Default::default() };
    let serde_json::Value::Object(map) = serde_json::to_value(ipam).expect("IpamConf serialises") else {
        unreachable!("a struct serialises to an object")
    };
    keys.extend(map.keys().map(|k| format!("ipam.{k}")));
    keys
}

/// The keys of a conflist's top level, which libcni reads: the names
/// `cni_types::NetConfList` serialises with every field set (a flattened catch-all hides
/// them from the recording; the literal below stops compiling when a field is added).
pub fn list_keys() -> BTreeSet<String> {
    let every_field = cni_types::NetConfList {
        cni_version: "1.1.0".into(),
        cni_versions: vec!["1.1.0".into()],
        name: "n".into(),
        disable_check: true,
        disable_gc: true,
        load_only_inlined_plugins: true,
        plugins: vec![Default::default()],
        extra: Default::default(),
    };
    let serde_json::Value::Object(map) = serde_json::to_value(every_field).expect("NetConfList serialises")
    else {
        unreachable!("a struct serialises to an object")
    };
    map.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_keys_name_every_list_field() {
        let keys = list_keys();
        for key in [
            "cniVersion",
            "cniVersions",
            "name",
            "disableCheck",
            "disableGC",
            "loadOnlyInlinedPlugins",
            "plugins",
        ] {
            assert!(keys.contains(key), "{key}: {keys:?}");
        }
    }

    #[test]
    fn common_keys_name_the_spec_fields() {
        let common = common_keys();
        for key in ["cniVersion", "name", "type", "capabilities", "ipam", "ipam.type", "dns.nameservers"] {
            assert!(common.contains(key), "{key}: {common:?}");
        }
    }
}
