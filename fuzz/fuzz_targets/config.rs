//! Network configurations: a `.conflist` and a `.conf` as libcni loads them, and a plugin's
//! stdin as cni-types models it. Loading never panics; a loaded list keeps its name and
//! version and every plugin has a type; a single configuration upconverts to a list of
//! one; the plugin model prints and reads back equal.
#![no_main]

use cni_types::{NetConf, NetConfList};
use libcni::{NetworkConfig, NetworkConfigList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = NetworkConfigList::from_bytes(data) {
        assert!(!list.name().is_empty(), "a loaded list has a name");
        for index in 0..list.plugins().len() {
            assert!(!list.plugin_type(index).is_empty(), "plugin {index} has a type");
        }
    }
    if let Ok(conf) = NetworkConfig::from_bytes(data) {
        let list = conf.as_list();
        assert_eq!(list.plugins().len(), 1);
        assert!(!list.plugin_type(0).is_empty());
    }
    if let Ok(conf) = serde_json::from_slice::<NetConf>(data) {
        let printed = serde_json::to_vec(&conf).expect("a NetConf serialises");
        let back: NetConf = serde_json::from_slice(&printed).expect("a printed NetConf reads back");
        assert_eq!(back, conf);
        let _ = conf.args_cni();
        let _ = conf.runtime_config("portMappings");
    }
    if let Ok(list) = serde_json::from_slice::<NetConfList>(data) {
        let printed = serde_json::to_vec(&list).expect("a NetConfList serialises");
        let back: NetConfList = serde_json::from_slice(&printed).expect("a printed NetConfList reads back");
        assert_eq!(back, list);
    }
});
