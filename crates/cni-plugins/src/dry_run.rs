//! A plugin configuration checked as the plugin's ADD would check it, without touching
//! anything: what `cnitool validate` reports wrong types and out-of-range values with.

use cni_sdk::catalog::Catalog;
use cni_sdk::{CniError, Command, Request, Version};
use serde_json::{Map, Value};

/// Runs plugin `plugin_type`'s configuration stage (and its IPAM plugin's, when that is in
/// the catalog too) on `conf`, a plugin object of a list with `name` and `cniVersion`
/// already set, as an ADD for interface `eth0` of a container with no CNI_ARGS. `None`
/// when the plugin is not in the catalog.
pub fn check_add(
    catalog: &Catalog,
    plugin_type: &str,
    conf: &Map<String, Value>,
    version: Version,
) -> Option<Result<(), CniError>> {
    let stdin = serde_json::to_vec(conf).expect("a JSON map serialises");
    let parsed = match serde_json::from_slice(&stdin) {
        Ok(parsed) => parsed,
        Err(e) => return Some(Err(CniError::new(6u32, format!("decoding the network configuration: {e}")))),
    };
    let req = Request {
        command: Command::Add,
        container_id: "cnitool-validate".into(),
        netns: "/run/netns/cnitool-validate".into(),
        ifname: "eth0".into(),
        args: Default::default(),
        path: vec![],
        stdin,
        conf: parsed,
        version,
        trace: None,
    };
    catalog.config_stage_with_ipam(plugin_type, &req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_add(
        plugin_type: &str,
        conf: &Map<String, Value>,
        version: Version,
    ) -> Option<Result<(), CniError>> {
        super::check_add(&Catalog::new(&[crate::registry::catalog()]), plugin_type, conf, version)
    }

    fn conf(value: Value) -> Map<String, Value> {
        let Value::Object(map) = value else { panic!("not an object") };
        map
    }

    #[test]
    fn a_bad_value_is_refused_with_the_plugins_message_and_a_good_one_passes() {
        let bad = conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "bridge", "mtu": 5}));
        let e = check_add("bridge", &bad, Version::V1_1_0).unwrap().unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("mtu"), "{}", e.msg);
        let good = conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "bridge", "mtu": 1400}));
        assert!(check_add("bridge", &good, Version::V1_1_0).unwrap().is_ok());
        assert!(check_add("whereabouts", &good, Version::V1_1_0).is_none());
        let dummy = conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "dummy"}));
        assert!(check_add("dummy", &dummy, Version::V1_1_0).unwrap().is_err(), "dummy needs an IPAM plugin");
        let bad_range = conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.1.0.0/33"}}));
        assert!(check_add("bridge", &bad_range, Version::V1_1_0).unwrap().is_err(), "host-local's stage ran");
    }

    #[test]
    fn the_slaac_ipam_stage_runs_behind_an_interface_plugin() {
        let with =
            |ipam: Value| conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "macvlan", "ipam": ipam}));
        let bad = with(json!({"type": "slaac", "timeout": 600}));
        let e = check_add("macvlan", &bad, Version::V1_1_0).unwrap().unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("ipam.timeout"), "{}", e.msg);
        let good = with(json!({"type": "slaac", "timeout": 5}));
        assert!(check_add("macvlan", &good, Version::V1_1_0).unwrap().is_ok());
        let gateway = conf(json!({"cniVersion": "1.1.0", "name": "n", "type": "bridge", "isGateway": true,
            "ipam": {"type": "slaac"}}));
        assert!(check_add("bridge", &gateway, Version::V1_1_0).unwrap().unwrap_err().msg.contains("slaac"));
    }
}
