//! The version matrix: lists of each version against plugins claiming various versions,
//! and results converted between plugins that print different versions.

use crate::support::Rig;
use cni_types::Version;
use libcni::{Error, RuntimeConf};
use serde_json::{json, Value};

fn rt() -> RuntimeConf {
    RuntimeConf::new("ctr", "/run/netns/x", "eth0")
}

#[test]
fn validation_requires_every_plugin_to_claim_the_lists_version() {
    let claims: [&[&str]; 3] = [
        &["0.3.0", "0.3.1", "0.4.0"],
        &["1.0.0", "1.1.0"],
        &["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    ];
    for version in Version::ALL {
        let rig = Rig::new();
        rig.plugin_claiming("old", Some(claims[0]))
            .plugin_claiming("new", Some(claims[1]))
            .plugin_claiming("all", Some(claims[2]));
        for (i, plugin) in ["old", "new", "all"].into_iter().enumerate() {
            let list = rig.list(json!({"cniVersion": version.as_str(), "name": "n",
                "plugins": [{"type": plugin, "capabilities": {"portMappings": true, "mac": false}}, {"type": "all", "capabilities": {"ips": true}}]}));
            let outcome = rig.cni.validate_network_list(&list);
            if claims[i].contains(&version.as_str()) {
                assert_eq!(outcome.unwrap(), ["ips", "portMappings"], "{version} {plugin}");
            } else {
                match outcome.unwrap_err() {
                    Error::PluginVersionUnsupported { plugin_type, version: v, supported } => {
                        assert_eq!((plugin_type.as_str(), v.as_str()), (plugin, version.as_str()));
                        assert_eq!(supported, claims[i]);
                    }
                    other => panic!("{version} {plugin}: {other}"),
                }
            }
        }
    }
}

#[test]
fn validation_reports_every_bad_plugin() {
    let rig = Rig::new();
    rig.plugin_claiming("old", Some(&["0.3.1"]));
    let list = rig
        .list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "old"}, {"type": "absent"}]}));
    let Error::Multiple(errors) = rig.cni.validate_network_list(&list).unwrap_err() else { panic!() };
    assert!(matches!(errors[0], Error::PluginVersionUnsupported { .. }));
    assert!(matches!(errors[1], Error::PluginNotFound { .. }));
}

#[test]
fn version_info_is_asked_the_way_the_reference_asks() {
    let rig = Rig::new();
    rig.plugin_claiming("p", Some(&["0.4.0", "1.0.0"]));
    let info = rig.cni.get_version_info("p").unwrap();
    assert_eq!(info.supported_versions, ["0.4.0", "1.0.0"]);
    let inv = &rig.log()[0];
    assert_eq!(inv.command, "VERSION");
    assert_eq!(
        (inv.var("CNI_NETNS"), inv.var("CNI_IFNAME"), inv.var("CNI_PATH")),
        ("dummy", "dummy", "dummy")
    );
    // The test plugin does not read stdin for VERSION; check what we sent with a script.
    let seen = rig.dir.path().join("stdin.txt");
    rig.script(
        "cat-stdin",
        &format!("#!/bin/sh\ncat > '{}'\necho '{{\"cniVersion\":\"0.2.0\"}}'\n", seen.display()),
    );
    let info = rig.cni.get_version_info("cat-stdin").unwrap();
    assert_eq!(info.supported_versions, ["0.1.0", "0.2.0"], "0.2.0 plugins answered without the list");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), r#"{"cniVersion":"1.1.0"}"#);

    rig.script(
        "ancient",
        "#!/bin/sh\necho '{\"code\":4,\"msg\":\"unknown CNI_COMMAND: VERSION\"}'\nexit 1\n",
    );
    assert_eq!(rig.cni.get_version_info("ancient").unwrap().supported_versions, ["0.1.0"]);
    rig.script("garbage", "#!/bin/sh\necho 'v1.2.3'\n");
    assert!(matches!(rig.cni.get_version_info("garbage"), Err(Error::Decode { .. })));
    rig.script("noversions", "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\"}'\n");
    assert!(matches!(rig.cni.get_version_info("noversions"), Err(Error::Decode { .. })));
}

/// The same address in each version's layout.
fn result_in(version: &str) -> Value {
    match version {
        "0.1.0" | "0.2.0" => json!({"cniVersion": version,
            "ip4": {"ip": "10.5.0.2/24", "gateway": "10.5.0.1", "routes": [{"dst": "0.0.0.0/0"}]}}),
        "0.3.0" | "0.3.1" | "0.4.0" => json!({"cniVersion": version,
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"version": "4", "interface": 0, "address": "10.5.0.2/24", "gateway": "10.5.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]}),
        _ => json!({"cniVersion": version,
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x", "mtu": 1400}],
            "ips": [{"interface": 0, "address": "10.5.0.2/24", "gateway": "10.5.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]}),
    }
}

#[test]
fn results_are_converted_to_the_lists_version_between_plugins() {
    let list_versions = ["0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    let printed_versions = ["0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    let rig = Rig::new();
    rig.plugin("printer").plugin("echo");
    for list_version in list_versions {
        for printed in printed_versions {
            rig.clear_log();
            let stdout = serde_json::to_string(&result_in(printed)).unwrap();
            let list = rig.list(json!({"cniVersion": list_version, "name": "n", "plugins": [
                {"type": "printer", "testBehaviour": {"exitCode": 0, "stdout": stdout}},
                {"type": "echo", "testBehaviour": {"echoPrevResult": true}}]}));
            let result = rig.cni.add_network_list(&list, &rt()).unwrap();
            let prev = &rig.log()[1].stdin["prevResult"];
            let case = format!("list {list_version}, plugin printed {printed}");
            assert_eq!(prev["cniVersion"], list_version, "{case}");
            assert_eq!(&result.json, prev, "{case}");
            let model = result.parse().unwrap();
            assert_eq!(model.ips[0].address.to_string(), "10.5.0.2/24", "{case}");
            assert_eq!(model.ips[0].gateway.unwrap().to_string(), "10.5.0.1", "{case}");
            assert_eq!(model.routes[0].dst.to_string(), "0.0.0.0/0", "{case}");
            match list_version {
                "0.3.0" | "0.3.1" | "0.4.0" => {
                    assert_eq!(prev["ips"][0]["version"], "4", "{case}");
                    assert!(prev["interfaces"].get(0).is_none_or(|i| i.get("mtu").is_none()), "{case}");
                }
                "1.0.0" | "1.1.0" => assert!(prev["ips"][0].get("version").is_none(), "{case}"),
                _ => assert_eq!(prev["ip4"]["ip"], "10.5.0.2/24", "{case}"),
            }
        }
    }
}

#[test]
fn a_result_that_cannot_be_expressed_in_the_lists_version_fails_clearly() {
    let rig = Rig::new();
    rig.plugin("p");
    let stdout = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}"#;
    let list = rig.list(json!({"cniVersion": "0.2.0", "name": "n", "plugins": [
        {"type": "p", "testBehaviour": {"exitCode": 0, "stdout": stdout}}]}));
    let err = rig.cni.add_network_list(&list, &rt()).unwrap_err();
    assert!(matches!(&err, Error::ResultConversion { version: Version::V0_2_0, .. }), "{err}");
    assert!(err.to_string().contains("\"p\""), "{err}");
}

#[test]
fn a_result_without_cni_version_is_taken_to_be_in_the_lists_version() {
    let rig = Rig::new();
    rig.plugin("p");
    let stdout = r#"{"ips":[{"version":"4","address":"10.5.0.2/24"}]}"#;
    let list = rig.list(json!({"cniVersion": "0.4.0", "name": "n", "plugins": [
        {"type": "p", "testBehaviour": {"exitCode": 0, "stdout": stdout}}]}));
    let result = rig.cni.add_network_list(&list, &rt()).unwrap();
    assert_eq!(
        result.json,
        json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.5.0.2/24"}]})
    );
}
