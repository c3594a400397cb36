use super::*;
use cni_types::{Interface, IpConfig, Route};
use serde_json::json;

/// The seed's example configuration.
fn seed_config() -> Value {
    json!({"container_networks": [
        {"name": "lo", "aci": "apcera.com/kurma/lo-netplugin"},
        {"name": "mynet", "aci": "apcera.com/kurma/cni-netplugin", "containerInterface": "eth0",
         "type": "bridge", "bridge": "mynet0", "isGateway": true, "ipMasq": true,
         "ipam": {"type": "host-local", "subnet": "10.10.0.0/16", "routes": [{"dst": "0.0.0.0/0"}]}}
    ]})
}

#[test]
fn the_seed_example_parses_with_every_plugin_key_kept_in_order() {
    let entries = parse_container_networks(&seed_config()).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].name, "lo");
    assert_eq!(entries[0].aci, "apcera.com/kurma/lo-netplugin");
    assert_eq!(entries[0].container_interface, None);
    assert_eq!(entries[0].plugin_type, None);
    let mynet = &entries[1];
    assert_eq!(mynet.container_interface.as_deref(), Some("eth0"));
    assert_eq!(mynet.plugin_type.as_deref(), Some("bridge"));
    let keys: Vec<_> = mynet.plugin_keys().keys().cloned().collect();
    assert_eq!(keys, ["name", "type", "bridge", "isGateway", "ipMasq", "ipam"]);
    assert_eq!(mynet.plugin_keys()["ipam"]["routes"], json!([{"dst": "0.0.0.0/0"}]));
    // Round trip: what goes on stdin is the entry as written.
    let again = NetworkEntry::from_slice(&mynet.to_bytes()).unwrap();
    assert_eq!(&again, mynet);
}

#[test]
fn cni_config_drops_kurma_keys_applies_defaults_and_names_a_version() {
    let entries = parse_container_networks(&seed_config()).unwrap();
    let defaults: Map<String, Value> = serde_json::from_value(json!({"type": "loopback"})).unwrap();
    let lo = entries[0].cni_config(&defaults);
    assert_eq!(Value::Object(lo), json!({"type": "loopback", "name": "lo", "cniVersion": "1.1.0"}));
    // The entry's own keys win over the image's defaults; its cniVersion is kept.
    let mut raw = entries[1].raw.clone();
    raw.insert("cniVersion".into(), json!("0.4.0"));
    let mynet = NetworkEntry::from_value(1, &Value::Object(raw)).unwrap().cni_config(&defaults);
    assert_eq!(mynet["type"], "bridge");
    assert_eq!(mynet["cniVersion"], "0.4.0");
    assert!(!mynet.contains_key("aci") && !mynet.contains_key("containerInterface"));
}

#[test]
fn bad_entries_name_the_entry_and_the_field() {
    let cases = [
        (json!([{"aci": "file:///x.aci"}]), "name", "container_networks[0]: \"name\" is missing"),
        (json!([{"name": "a"}]), "aci", "container_networks[0] (\"a\"): \"aci\" is missing"),
        (json!([{"name": "", "aci": "x"}]), "name", "\"name\" must not be empty"),
        (json!([{"name": "a", "aci": 5}]), "aci", "\"aci\" must be a string"),
        (
            json!([{"name": "a", "aci": "x", "containerInterface": 1}]),
            "containerInterface",
            "must be a string",
        ),
        (json!([{"name": "a", "aci": "x", "type": ""}]), "type", "\"type\" must not be empty"),
        (
            json!([{"name": "a", "aci": "x"}, {"name": "a", "aci": "y"}]),
            "name",
            "container_networks[1] (\"a\"): the name is already used by container_networks[0]",
        ),
    ];
    for (list, field, message) in cases {
        let err = parse_container_networks(&json!({"container_networks": list})).unwrap_err();
        assert_eq!(err.field(), Some(field), "{err}");
        assert!(err.to_string().contains(message), "{err} does not contain {message}");
    }
    let err = parse_container_networks(&json!({"container_networks": [7]})).unwrap_err();
    assert!(err.to_string().contains("container_networks[0]: an entry must be a JSON object"), "{err}");
    assert_eq!(parse_container_networks(&json!({})).unwrap_err(), ModelError::NoNetworks);
    assert!(matches!(parse_config_bytes(b"{"), Err(ModelError::Json(_))));
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_bridge_result_converts_to_the_ip4_form_with_the_container_address() {
    // Host-side interfaces (bridge, host veth) come first, as bridge reports them.
    let result = CniResult {
        interfaces: vec![
            Interface { name: "mynet0".into(), ..Default::default() },
            Interface { name: "veth1".into(), ..Default::default() },
            Interface { name: "eth0".into(), sandbox: "/proc/1/ns/net".into(), ..Default::default() },
        ],
        ips: vec![
            IpConfig { interface: Some(0), address: net("10.10.0.1/16"), gateway: None },
            IpConfig { interface: Some(2), address: net("10.10.0.2/16"), gateway: Some(ip("10.10.0.1")) },
            IpConfig { interface: Some(2), address: net("fd00::2/64"), gateway: Some(ip("fd00::1")) },
        ],
        routes: vec![Route::new(net("0.0.0.0/0"), None), Route::new(net("::/0"), Some(ip("fd00::1")))],
        dns: Dns { nameservers: vec!["10.10.0.1".into()], ..Default::default() },
    };
    let kurma = KurmaResult::from_cni(&result, Some("eth0"));
    assert_eq!(
        serde_json::to_value(&kurma).unwrap(),
        json!({
            "ip4": {"ip": "10.10.0.2/16", "gateway": "10.10.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
            "ip6": {"ip": "fd00::2/64", "gateway": "fd00::1", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
            "dns": {"nameservers": ["10.10.0.1"]}
        })
    );
}

#[test]
fn the_named_interface_wins_over_other_container_interfaces() {
    let result = CniResult {
        interfaces: vec![
            Interface { name: "eth0".into(), sandbox: "/ns".into(), ..Default::default() },
            Interface { name: "eth1".into(), sandbox: "/ns".into(), ..Default::default() },
        ],
        ips: vec![
            IpConfig { interface: Some(0), address: net("10.0.0.2/24"), gateway: None },
            IpConfig { interface: Some(1), address: net("10.1.0.2/24"), gateway: None },
        ],
        ..Default::default()
    };
    assert_eq!(KurmaResult::from_cni(&result, Some("eth1")).ip4.unwrap().ip, net("10.1.0.2/24"));
    assert_eq!(KurmaResult::from_cni(&result, None).ip4.unwrap().ip, net("10.0.0.2/24"));
}

#[test]
fn results_of_every_version_convert_and_one_without_addresses_gives_an_empty_object() {
    let v02 = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1",
        "routes": [{"dst": "0.0.0.0/0"}]}});
    let v04 = json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.1.2.3/24",
        "gateway": "10.1.2.1"}], "routes": [{"dst": "0.0.0.0/0"}]});
    let v1 = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1"}],
        "routes": [{"dst": "0.0.0.0/0"}]});
    let expected =
        json!({"ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1", "routes": [{"dst": "0.0.0.0/0"}]}});
    for json in [v02, v04, v1] {
        let kurma = KurmaResult::from_cni_json(&json, Version::V1_1_0, None).unwrap();
        assert_eq!(serde_json::to_value(&kurma).unwrap(), expected, "from {json}");
    }
    let lo = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "tap0"}]});
    let kurma = KurmaResult::from_cni_json(&lo, Version::V1_1_0, None).unwrap();
    assert_eq!(serde_json::to_string(&kurma).unwrap(), "{}");
    // The printed form reads back.
    let back: KurmaResult = serde_json::from_value(expected).unwrap();
    assert_eq!(back.ip4.unwrap().gateway, Some(ip("10.1.2.1")));
    assert!(KurmaResult::from_cni_json(&json!({"cniVersion": "9.9.9"}), Version::V1_1_0, None).is_err());
}
