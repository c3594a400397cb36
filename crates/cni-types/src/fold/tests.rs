use super::*;
use crate::NetConf;
use serde_json::json;

/// Deserialises through [`deserialize`] from text, as the plugins' entry points do.
fn from_text<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, serde_json::Error> {
    located(text).map_err(|(_, e)| e)
}

/// The same, keeping the path to a failure.
fn located<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, (String, serde_json::Error)> {
    deserialize(&mut serde_json::Deserializer::from_str(text))
}

/// And from a parsed value (a `runtimeConfig` entry).
fn from_value<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, serde_json::Error> {
    deserialize(value).map_err(|(_, e)| e)
}

#[derive(Debug, Deserialize, PartialEq)]
struct Mapping {
    #[serde(rename = "hostPort")]
    host_port: u16,
    #[serde(rename = "containerPort")]
    container_port: u16,
    #[serde(default)]
    protocol: String,
    #[serde(default, rename = "hostIP")]
    host_ip: String,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Runtime {
    #[serde(default, rename = "portMappings")]
    port_mappings: Option<Vec<Mapping>>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Conf {
    #[serde(default, rename = "isGateway")]
    is_gateway: bool,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<Runtime>,
    #[serde(default)]
    labels: Map<String, Value>,
}

#[test]
fn go_cased_keys_reach_their_fields_at_every_depth() {
    let conf: Conf = from_text(
        r#"{"IsGateway":true,"RUNTIMECONFIG":{"PortMappings":[
            {"HostPort":12000,"ContainerPort":80,"Protocol":"tcp","HostIP":""}]}}"#,
    )
    .unwrap();
    assert!(conf.is_gateway);
    let mappings = conf.runtime_config.unwrap().port_mappings.unwrap();
    assert_eq!(
        mappings,
        [Mapping { host_port: 12000, container_port: 80, protocol: "tcp".into(), host_ip: String::new() }]
    );
    let runtime: Runtime = from_value(&json!({"portmappings":[{"hostport":1,"containerport":2}]})).unwrap();
    assert_eq!(runtime.port_mappings.unwrap()[0].host_port, 1);
}

#[test]
fn maps_and_values_keep_their_keys_as_written() {
    let conf: Conf = from_text(r#"{"labels":{"IsGateway":{"HostPort":1}}}"#).unwrap();
    assert!(!conf.is_gateway);
    assert_eq!(conf.labels, json!({"IsGateway":{"HostPort":1}}).as_object().unwrap().clone());
}

#[test]
fn unknown_keys_are_still_ignored_and_still_refused_where_they_were() {
    let conf: Conf = from_text(r#"{"isGatewayX":true,"Unknown":{"a":1}}"#).unwrap();
    assert!(!conf.is_gateway);

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        mtu: Option<u32>,
    }
    assert_eq!(from_text::<Strict>(r#"{"MTU":1400}"#).unwrap().mtu, Some(1400));
    let e = from_text::<Strict>(r#"{"MTUs":1400}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `MTUs`"), "{e}");
}

#[test]
fn an_exact_name_wins_over_a_folded_one_and_else_the_first_declared_field() {
    #[derive(Debug, Deserialize, Default)]
    #[serde(default)]
    struct TwoCases {
        #[serde(rename = "ab")]
        lower: u8,
        #[serde(rename = "AB")]
        upper: u8,
    }
    let t: TwoCases = from_text(r#"{"AB":2}"#).unwrap();
    assert_eq!((t.lower, t.upper), (0, 2));
    let t: TwoCases = from_text(r#"{"Ab":1}"#).unwrap();
    assert_eq!((t.lower, t.upper), (1, 0));
    assert_eq!(resolve(&["ab", "AB"], "aB"), Some("ab"));
    assert_eq!(resolve(&["ab", "AB"], "abc"), None);
}

#[test]
fn two_keys_folding_to_one_field_are_refused_not_silently_merged() {
    // Go lets the last win; which one an operator meant is not knowable, so fail closed.
    let e = from_text::<Conf>(r#"{"isGateway":false,"IsGateway":true}"#).unwrap_err().to_string();
    assert!(e.contains("duplicate field `isGateway`"), "{e}");
}

#[test]
fn folding_is_gos_kelvin_sign_and_long_s_included() {
    assert!(folds_to("IsGateway", "isGateway"));
    assert!(folds_to("i\u{017F}Gateway", "isGateway"));
    assert!(folds_to("\u{212A}ey", "key"));
    assert!(!folds_to("isGatewa", "isGateway"));
    assert!(!folds_to("isGatewayy", "isGateway"));
    assert!(!folds_to("is_gateway", "isGateway"));
    // Other non-ASCII letters never match an ASCII name.
    assert!(!folds_to("\u{0130}sGateway", "isGateway"));
    let conf: Conf = from_text("{\"i\u{017F}gateway\":true}").unwrap();
    assert!(conf.is_gateway);
}

#[test]
fn structs_that_keep_unknown_keys_fold_the_known_ones() {
    let conf: NetConf = from_text(
        r#"{"CNIVersion":"1.0.0","Name":"n","Type":"bridge","Bridge":"cr0",
            "IPAM":{"Type":"host-local","Subnet":"10.1.0.0/16"},
            "RuntimeConfig":{"Bandwidth":{"IngressRate":8}},"Args":{"CNI":{"ips":["10.1.0.9"]}}}"#,
    )
    .unwrap();
    assert_eq!(
        (conf.cni_version.as_str(), conf.name.as_str(), conf.plugin_type.as_str()),
        ("1.0.0", "n", "bridge")
    );
    let ipam = conf.ipam.as_ref().unwrap();
    assert_eq!(ipam.ipam_type, "host-local");
    assert_eq!(Value::Object(ipam.extra.clone()), json!({"Subnet":"10.1.0.0/16"}));
    assert_eq!(Value::Object(conf.extra.clone()), json!({"Bridge":"cr0"}));
    assert_eq!(conf.runtime_config("bandwidth"), Some(&json!({"IngressRate":8})));
    assert_eq!(conf.args_cni().unwrap()["ips"][0], "10.1.0.9");
}

#[test]
fn without_fold_keys_the_same_types_match_exactly_as_before() {
    let conf: NetConf = serde_json::from_str(r#"{"name":"n","Type":"bridge","type":"ptp"}"#).unwrap();
    assert_eq!(conf.plugin_type, "ptp");
    assert_eq!(conf.extra["Type"], "bridge");
}

#[test]
fn map_lookup_prefers_the_exact_key() {
    let map = json!({"Bandwidth":1,"bandwidth":2}).as_object().unwrap().clone();
    assert_eq!(get(&map, "bandwidth"), Some(&json!(2)));
    let map = json!({"BANDWIDTH":1}).as_object().unwrap().clone();
    assert_eq!(get(&map, "bandwidth"), Some(&json!(1)));
    assert_eq!(get(&map, "band"), None);
}

#[test]
fn enums_options_and_newtypes_fold_inside() {
    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(rename = "ingressRate")]
        ingress_rate: u64,
    }
    #[derive(Debug, Deserialize, PartialEq)]
    struct Wrapper(Inner);
    #[derive(Debug, Deserialize, PartialEq)]
    enum Choice {
        #[serde(rename = "limit")]
        Limit {
            #[serde(rename = "burstSize")]
            burst: u64,
        },
        #[serde(rename = "wrapped")]
        Wrapped(Wrapper),
    }
    let v: Vec<Option<Choice>> =
        from_text(r#"[{"limit":{"BurstSize":3}},{"wrapped":{"IngressRate":4}},null]"#).unwrap();
    assert_eq!(
        v,
        [Some(Choice::Limit { burst: 3 }), Some(Choice::Wrapped(Wrapper(Inner { ingress_rate: 4 }))), None]
    );
}

/// The path a failure is reported at, as [`deserialize`] renders it.
fn failure_path<T: for<'de> Deserialize<'de> + fmt::Debug>(text: &str) -> String {
    located::<T>(text).unwrap_err().0
}

#[test]
fn a_failure_is_placed_at_the_value_that_caused_it_keys_as_written() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Range {
        subnet: ipnet::IpNet,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Ipam {
        ranges: Vec<Vec<Range>>,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Conf {
        mtu: Option<u32>,
        ipam: Option<Ipam>,
        capabilities: Option<std::collections::BTreeMap<String, bool>>,
    }
    let ranges = r#"{"ipam":{"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.1.0/33"}]]}}"#;
    assert_eq!(failure_path::<Conf>(ranges), "ipam.ranges[0][1].subnet");
    assert_eq!(failure_path::<Conf>(r#"{"IPAM":{"Ranges":[[{"SubNet":"x"}]]}}"#), "IPAM.Ranges[0][0].SubNet");
    assert_eq!(failure_path::<Conf>(r#"{"mtu":"big"}"#), "mtu");
    // A plain map's key is captured too.
    assert_eq!(failure_path::<Conf>(r#"{"capabilities":{"portMappings":5}}"#), "capabilities.portMappings");
    // The document itself: the root.
    assert_eq!(failure_path::<Conf>("[]"), ".");
    // A struct's own complaint (a missing field) is placed at the struct.
    assert_eq!(failure_path::<Conf>(r#"{"ipam":{}}"#), "ipam");
    // A key that could not be read at all.
    assert_eq!(failure_path::<Conf>(r#"{"ipam":{5:1}}"#), "ipam.?");
    // Only the first failure counts: nothing is added while the error travels outwards.
    assert_eq!(failure_path::<Vec<Conf>>(r#"[{}, {"mtu":-1}]"#), "[1].mtu");
}

#[test]
fn an_enum_failure_is_placed_at_its_variant() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Choice {
        #[serde(rename = "limit")]
        Limit { burst: u64 },
    }
    assert_eq!(failure_path::<Vec<Choice>>(r#"[{"limit":{"burst":"x"}}]"#), "[0].limit.burst");
}
