use super::*;
use proptest::prelude::*;
use serde_json::json;

fn sample() -> CniResult {
    serde_json::from_value::<v1::ResultV1>(json!({
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth1", "mac": "55:44:33:22:11:11", "mtu": 1400},
            {"name": "eth0", "mac": "99:88:77:66:55:44", "mtu": 1400, "sandbox": "/run/netns/blue",
             "socketPath": "/run/vhost.sock", "pciID": "0000:00:1f.6"}
        ],
        "ips": [
            {"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
            {"interface": 2, "address": "fd00::5/64", "gateway": "fd00::1"},
            {"interface": 2, "address": "10.2.0.5/16"},
            {"address": "fd01::5/64"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1300, "advmss": 1260, "priority": 10, "table": 100, "scope": 0},
            {"dst": "::/0", "gw": "fd00::1"},
            {"dst": "192.168.0.0/24"}
        ],
        "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"], "options": ["ndots:2"]}
    }))
    .unwrap()
    .into()
}

/// What of `model` survives being printed in `version` and read back, written from the
/// rules in docs/compatibility.md independently of the implementation.
fn survives(model: &CniResult, version: Version) -> Option<CniResult> {
    match version.family() {
        ResultFamily::V1 => Some(model.clone()),
        ResultFamily::V04 => Some(CniResult {
            interfaces: model
                .interfaces
                .iter()
                .map(|i| Interface {
                    name: i.name.clone(),
                    mac: i.mac.clone(),
                    sandbox: i.sandbox.clone(),
                    ..Default::default()
                })
                .collect(),
            ips: model.ips.clone(),
            routes: model.routes.iter().map(|r| Route::new(r.dst, r.gw)).collect(),
            dns: model.dns.clone(),
        }),
        ResultFamily::V02 => {
            let mut out = CniResult { dns: model.dns.clone(), ..Default::default() };
            for v4 in [true, false] {
                if let Some(ip) = model.ips.iter().find(|ip| ip.address.addr().is_ipv4() == v4) {
                    out.ips.push(IpConfig { interface: None, address: ip.address, gateway: ip.gateway });
                    out.routes.extend(
                        model
                            .routes
                            .iter()
                            .filter(|r| r.dst.addr().is_ipv4() == v4)
                            .map(|r| Route::new(r.dst, r.gw)),
                    );
                }
            }
            (!out.ips.is_empty()).then_some(out)
        }
    }
}

#[test]
fn every_pair_of_versions_converts_by_the_rules() {
    let model = sample();
    for from in Version::ALL {
        let written = model.to_value(from).unwrap();
        assert_eq!(written["cniVersion"], from.as_str());
        let in_from = survives(&model, from).unwrap();
        for to in Version::ALL {
            let converted = CniResult::convert(written.clone(), from, to)
                .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
            assert_eq!(converted["cniVersion"], to.as_str(), "{from} -> {to}");
            let back = CniResult::from_value(converted, to).unwrap();
            assert_eq!(back, survives(&in_from, to).unwrap(), "{from} -> {to}");
        }
    }
}

#[test]
fn every_pair_without_addresses_fails_only_towards_0_2() {
    let model = CniResult {
        interfaces: vec![Interface { name: "eth0".into(), ..Default::default() }],
        ..Default::default()
    };
    for from in Version::ALL.into_iter().filter(|v| v.family() != ResultFamily::V02) {
        let written = model.to_value(from).unwrap();
        for to in Version::ALL {
            let converted = CniResult::convert(written.clone(), from, to);
            match to.family() {
                ResultFamily::V02 => {
                    let err = converted.unwrap_err();
                    assert!(matches!(err, ResultError::NoAddressForV02(v) if v == to), "{from} -> {to}");
                    assert_eq!(err.to_cni_error().code, 1);
                }
                _ => assert!(converted.is_ok(), "{from} -> {to}"),
            }
        }
    }
}

#[test]
fn to_0_2_keeps_first_address_per_family_and_their_routes() {
    let v = sample().to_value(Version::V0_2_0).unwrap();
    assert_eq!(
        v,
        json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/24"}]},
            "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
            "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"], "options": ["ndots:2"]}
        })
    );
}

#[test]
fn to_0_4_recomputes_version_and_drops_1_1_fields() {
    let v = sample().to_value(Version::V0_4_0).unwrap();
    assert_eq!(
        v["interfaces"][2],
        json!({"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/run/netns/blue"})
    );
    assert_eq!(
        v["ips"][0],
        json!({"version": "4", "interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"})
    );
    assert_eq!(v["ips"][1]["version"], "6");
    assert_eq!(v["ips"][3], json!({"version": "6", "address": "fd01::5/64"}));
    assert_eq!(v["routes"][0], json!({"dst": "0.0.0.0/0", "gw": "10.1.0.1"}));
}

#[test]
fn from_0_2_lists_ipv4_then_ipv6_without_interfaces() {
    let v02 = json!({
        "cniVersion": "0.2.0",
        "ip6": {"ip": "fd00::5/64", "routes": [{"dst": "::/0"}]},
        "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]}
    });
    let v1 = CniResult::convert(v02.clone(), Version::V0_2_0, Version::V1_0_0).unwrap();
    assert_eq!(
        v1,
        json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}, {"address": "fd00::5/64"}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
        })
    );
    let v04 = CniResult::convert(v02, Version::V0_1_0, Version::V0_3_1).unwrap();
    assert_eq!(v04["ips"][0]["version"], "4");
    assert_eq!(v04["ips"][1]["version"], "6");
}

#[test]
fn result_without_cni_version_takes_the_configs() {
    let (r, v) = CniResult::parse(json!({"ips": [{"address": "10.0.0.2/24"}]}), Version::V1_0_0).unwrap();
    assert_eq!(v, Version::V1_0_0);
    assert_eq!(r.ips.len(), 1);
    let (_, v) = CniResult::parse(
        json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}),
        Version::V1_0_0,
    )
    .unwrap();
    assert_eq!(v, Version::V0_4_0);
    assert!(matches!(
        CniResult::parse(json!({"cniVersion": "7.0.0"}), Version::V1_0_0),
        Err(ResultError::UnsupportedVersion(_))
    ));
}

#[test]
fn malformed_result_is_a_decode_error() {
    let err = CniResult::parse_bytes(br#"{"ips":[{"address":"not-an-ip"}]}"#, Version::V1_0_0).unwrap_err();
    assert_eq!(err.to_cni_error().code, 6);
}

fn arb_ipnet() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32).prop_map(|(a, p)| IpNet::new(IpAddr::from(a), p).unwrap()),
        (any::<[u8; 16]>(), 0u8..=128).prop_map(|(a, p)| IpNet::new(IpAddr::from(a), p).unwrap()),
    ]
}

fn arb_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![any::<[u8; 4]>().prop_map(IpAddr::from), any::<[u8; 16]>().prop_map(IpAddr::from)]
}

fn arb_text() -> impl Strategy<Value = String> {
    "[a-z0-9:/._-]{0,12}"
}

prop_compose! {
    fn arb_interface()(name in "[a-z0-9]{1,15}", mac in arb_text(), mtu in proptest::option::of(68u32..65536),
                       sandbox in arb_text(), socket_path in arb_text(), pci_id in arb_text()) -> Interface {
        Interface { name, mac, mtu, sandbox, socket_path, pci_id }
    }
}

prop_compose! {
    fn arb_route()(dst in arb_ipnet(), gw in proptest::option::of(arb_addr()), mtu in proptest::option::of(any::<u32>()),
                   advmss in proptest::option::of(any::<u32>()), priority in proptest::option::of(any::<u32>()),
                   table in proptest::option::of(any::<u32>()), scope in proptest::option::of(any::<u8>())) -> Route {
        Route { dst, gw, mtu, advmss, priority, table, scope }
    }
}

prop_compose! {
    fn arb_result()(interfaces in proptest::collection::vec(arb_interface(), 0..4),
                    ips in proptest::collection::vec((proptest::option::of(0usize..4), arb_ipnet(), proptest::option::of(arb_addr())), 0..5),
                    routes in proptest::collection::vec(arb_route(), 0..5),
                    nameservers in proptest::collection::vec(arb_text(), 0..3),
                    domain in arb_text()) -> CniResult {
        CniResult {
            interfaces,
            ips: ips.into_iter().map(|(interface, address, gateway)| IpConfig { interface, address, gateway }).collect(),
            routes,
            dns: Dns { nameservers: nameservers.into_iter().filter(|s| !s.is_empty()).collect(), domain, ..Default::default() },
        }
    }
}

proptest! {
    #[test]
    fn parse_after_print_is_identity_in_1_x(model in arb_result()) {
        for version in [Version::V1_0_0, Version::V1_1_0] {
            let text = serde_json::to_string(&model.to_value(version).unwrap()).unwrap();
            let (back, v) = CniResult::parse_bytes(text.as_bytes(), Version::V0_1_0).unwrap();
            prop_assert_eq!(v, version);
            prop_assert_eq!(&back, &model);
        }
    }

    #[test]
    fn parse_after_print_is_identity_on_what_each_version_keeps(model in arb_result()) {
        for version in Version::ALL {
            match survives(&model, version) {
                Some(kept) => {
                    let text = serde_json::to_string(&model.to_value(version).unwrap()).unwrap();
                    let (back, _) = CniResult::parse_bytes(text.as_bytes(), version).unwrap();
                    prop_assert_eq!(back, kept);
                }
                None => prop_assert!(model.to_value(version).is_err()),
            }
        }
    }
}

#[test]
fn result_keys_match_without_regard_to_case_as_the_reference_reads_them() {
    let r = CniResult::from_value(
        json!({"CNIVersion": "1.0.0", "Interfaces": [{"Name": "eth0", "Sandbox": "/run/netns/x"}],
               "IPs": [{"Address": "10.0.0.2/24", "Gateway": "10.0.0.1", "Interface": 0}],
               "Routes": [{"Dst": "0.0.0.0/0"}]}),
        Version::V1_0_0,
    )
    .unwrap();
    assert_eq!(r.interfaces[0].name, "eth0");
    assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
    assert_eq!(r.ips[0].interface, Some(0));
    assert_eq!(r.routes.len(), 1);
}
