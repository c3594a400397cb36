use super::*;
use serde_json::json;

fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

/// A config directory holding `net.conflist` (plugin `a`) and the empty directory `net/`
/// beside it, where sibling plugin files go.
fn list_with_plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "net.conflist",
        &json!({"cniVersion": "1.1.0", "name": "net", "plugins": [{"type": "a"}]}),
    );
    std::fs::create_dir(dir.path().join("net")).unwrap();
    dir
}

fn invalid_field(err: Error) -> (String, String) {
    match err {
        Error::InvalidConfig { origin, field, .. } => (origin, field),
        other => panic!("expected InvalidConfig, got {other}"),
    }
}

#[test]
fn conflists_come_first_in_lexical_order_then_confs() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "20-b.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "second"}]}),
    );
    write(
        dir.path(),
        "10-a.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "first"}]}),
    );
    write(dir.path(), "00-a.conf", &json!({"cniVersion": "1.0.0", "name": "net", "type": "conf"}));
    write(
        dir.path(),
        "01-other.json",
        &json!({"cniVersion": "0.4.0", "name": "single", "type": "bridge", "k": 1}),
    );
    let list = load_network(dir.path(), "net").unwrap();
    assert_eq!(list.plugin_type(0), "first");
    assert!(list.source.unwrap().ends_with("10-a.conflist"));

    let single = load_network(dir.path(), "single").unwrap();
    assert_eq!((single.name(), single.version, single.plugins().len()), ("single", Version::V0_4_0, 1));
    assert_eq!(single.plugins()[0]["k"], 1);
    let bytes: Value = serde_json::from_slice(&single.bytes).unwrap();
    assert_eq!(bytes["plugins"][0]["type"], "bridge");

    assert!(matches!(load_network(dir.path(), "absent"), Err(Error::NetworkNotFound { .. })));
}

#[test]
fn a_broken_file_for_another_network_does_not_block_but_one_for_this_network_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "00-other.conflist",
        &json!({"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": 3}]}),
    );
    std::fs::write(dir.path().join("01-garbage.conflist"), "{not json").unwrap();
    write(
        dir.path(),
        "02-net.conflist",
        &json!({"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": "ok"}]}),
    );
    // The garbage file's name cannot be read, so it is reported when it comes first.
    let err = load_network(dir.path(), "net").unwrap_err();
    assert!(
        matches!(&err, Error::ConfigDecode { origin, .. } if origin.ends_with("01-garbage.conflist")),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("01-garbage.conflist")).unwrap();
    assert_eq!(load_network(dir.path(), "net").unwrap().plugin_type(0), "ok");
    let (origin, field) = invalid_field(load_network(dir.path(), "other").unwrap_err());
    assert!(origin.ends_with("00-other.conflist"));
    assert_eq!(field, "plugins[0].type");
}

#[test]
fn sibling_plugin_files_are_appended_unless_only_inlined() {
    let dir = list_with_plugin_dir();
    write(&dir.path().join("net"), "20-c.conf", &json!({"type": "c"}));
    write(&dir.path().join("net"), "10-b.conf", &json!({"type": "b", "x": true}));
    write(&dir.path().join("net"), "ignored.json", &json!({"type": "z"}));
    let list = load_network(dir.path(), "net").unwrap();
    let types: Vec<_> = (0..list.plugins().len()).map(|i| list.plugin_type(i)).collect();
    assert_eq!(types, ["a", "b", "c"]);
    let cached: NetConfList = serde_json::from_slice(&list.bytes).unwrap();
    assert_eq!(cached.plugins.len(), 3, "the cache records the chain that ran");

    write(
        dir.path(),
        "net.conflist",
        &json!({"cniVersion": "1.1.0", "name": "net", "loadOnlyInlinedPlugins": "true", "plugins": [{"type": "a"}]}),
    );
    assert_eq!(load_network(dir.path(), "net").unwrap().plugins().len(), 1);

    // A list may have no inline plugins at all when its directory provides them.
    write(dir.path(), "net.conflist", &json!({"cniVersion": "1.1.0", "name": "net"}));
    assert_eq!(load_network(dir.path(), "net").unwrap().plugins().len(), 2);
    std::fs::remove_dir_all(dir.path().join("net")).unwrap();
    let (_, field) = invalid_field(load_network(dir.path(), "net").unwrap_err());
    assert_eq!(field, "plugins");
}

#[test]
fn bad_sibling_file_is_named() {
    let dir = list_with_plugin_dir();
    write(&dir.path().join("net"), "bad.conf", &json!({"type": "../x"}));
    let (origin, field) = invalid_field(load_network(dir.path(), "net").unwrap_err());
    assert!(origin.ends_with("net/bad.conf"), "{origin}");
    assert_eq!(field, "type");
}

#[test]
fn version_selection_takes_the_highest_supported() {
    let list = |v: Value| NetworkConfigList::from_bytes(&serde_json::to_vec(&v).unwrap());
    let l = list(
        json!({"cniVersion": "0.4.0", "cniVersions": ["1.0.0", "9.9.9", "1.1.0"], "name": "n", "plugins": [{"type": "a"}]}),
    );
    assert_eq!(l.unwrap().version, Version::V1_1_0);
    let l = list(json!({"cniVersions": ["0.3.1"], "name": "n", "plugins": [{"type": "a"}]}));
    assert_eq!(l.unwrap().version, Version::V0_3_1);
    let l = list(json!({"name": "n", "plugins": [{"type": "a"}]}));
    assert_eq!(l.unwrap().version, Version::V0_1_0);
    let (_, field) = invalid_field(
        list(json!({"cniVersion": "0.5.0", "name": "n", "plugins": [{"type": "a"}]})).unwrap_err(),
    );
    assert_eq!(field, "cniVersion");
    let (_, field) = invalid_field(
        list(json!({"cniVersions": ["2.0.0"], "name": "n", "plugins": [{"type": "a"}]})).unwrap_err(),
    );
    assert_eq!(field, "cniVersions");
    let (_, field) = invalid_field(
        list(json!({"cniVersions": [1], "name": "n", "plugins": [{"type": "a"}]})).unwrap_err(),
    );
    assert_eq!(field, "cniVersions[0]");
}

#[test]
fn validation_errors_name_the_field() {
    let cases = [
        (json!({"cniVersion": "1.0.0", "plugins": [{"type": "a"}]}), "name"),
        (json!({"cniVersion": "1.0.0", "name": "bad name", "plugins": [{"type": "a"}]}), "name"),
        (json!({"cniVersion": 1, "name": "n", "plugins": [{"type": "a"}]}), "cniVersion"),
        (json!({"cniVersion": "1.0.0", "name": "n", "plugins": {}}), "plugins"),
        (json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}), "plugins"),
        (json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "a"}, "x"]}), "plugins[1]"),
        (json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "a"}, {}]}), "plugins[1].type"),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "../../bin/sh"}]}),
            "plugins[0].type",
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "disableCheck": "yes", "plugins": [{"type": "a"}]}),
            "disableCheck",
        ),
    ];
    for (conf, expected) in cases {
        let err = NetworkConfigList::from_bytes(&serde_json::to_vec(&conf).unwrap()).unwrap_err();
        let (origin, field) = invalid_field(err);
        assert_eq!((origin.as_str(), field.as_str()), ("<bytes>", expected), "{conf}");
    }
    assert!(matches!(NetworkConfigList::from_bytes(b"[]"), Err(Error::ConfigDecode { .. })));
    assert!(matches!(NetworkConfig::from_bytes(br#"{"name":"n"}"#), Err(Error::InvalidConfig { .. })));
}

#[test]
fn unknown_keys_and_string_booleans_are_kept() {
    let bytes = br#"{"cniVersion":"1.1.0","name":"n","disableCheck":"true","disableGC":true,"vendorKey":{"a":1},"plugins":[{"type":"a","custom":[1,2]}]}"#;
    let list = NetworkConfigList::from_bytes(bytes).unwrap();
    assert!(list.list.disable_check && list.list.disable_gc);
    assert_eq!(list.list.extra["vendorKey"], json!({"a": 1}));
    assert_eq!(list.plugins()[0]["custom"], json!([1, 2]));
    assert_eq!(list.bytes, bytes.to_vec());
}
