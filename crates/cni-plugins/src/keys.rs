//! What the registry's key lists are made of: the serde types (and paths) plugins parse
//! their stdin into, and the request sources several plugins share. The tracing itself, and
//! the keys every plugin shares, are [`cni_sdk::keys`]'. Used by `cnitool validate` (unknown keys,
//! with a did-you-mean) and by the test keeping `docs/plugins/` in step with the code.

pub use cni_sdk::keys::{capabilities, common_keys, config_keys, keys_at, keys_of, list_keys, Keys};

/// The MAC address sources `cni_sdk::args::requested_mac` reads (with CNI_ARGS `MAC`).
pub(crate) fn requested_mac() -> Vec<Keys> {
    vec![keys_at::<String>("runtimeConfig.mac"), keys_at::<String>("args.cni.mac")]
}

/// The address sources `cni_sdk::args::requested_ips` and static read (with CNI_ARGS `IP`).
pub(crate) fn requested_ips() -> Vec<Keys> {
    vec![keys_at::<Vec<String>>("runtimeConfig.ips"), keys_at::<Vec<String>>("args.cni.ips")]
}

#[cfg(test)]
mod tests {
    use crate::registry::catalog;

    #[test]
    fn capabilities_come_from_runtime_config_keys() {
        let capabilities =
            |name: &str| super::capabilities(&(catalog().iter().find(|e| e.name == name).unwrap().keys)());
        assert!(capabilities("portmap").contains("portMappings"));
        assert!(capabilities("bandwidth").contains("bandwidth"));
        assert!(capabilities("bridge").contains("mac"));
        assert!(capabilities("loopback").is_empty());
    }
}
