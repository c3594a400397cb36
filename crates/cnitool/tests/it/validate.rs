//! `cnitool validate` on the fixtures in `tests/fixtures/validate/`: each broken conflist
//! gives exactly its expected findings (`findings.expected`: file → findings, each a
//! severity, plugin index, key, a part of the message and the suggestion), a valid
//! podman-style conflist gives none; against the Go reference plugins' directory, the
//! plugins it lacks are reported missing, the versions it lacks unsupported, and a
//! plugin that is not ours gets only the CNI_PATH and version checks.

use cni_testkit::binaries::workspace_binary;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");
const GO_PLUGINS: &str = "/usr/lib/cni";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate")
}

/// A directory holding our plugin set as the package installs it (links to the
/// multi-call binary, and etcd-ipam beside them).
fn our_plugins() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("va-bin").tempdir().unwrap();
    let binary = workspace_binary("cni-plugins", "cni-plugins");
    let status = Command::new(binary).arg("install").arg(dir.path()).output().unwrap().status;
    assert!(status.success(), "cni-plugins install failed");
    std::fs::copy(workspace_binary("cni-etcd-ipam", "etcd-ipam"), dir.path().join("etcd-ipam")).unwrap();
    dir
}

/// Runs `cnitool validate <target> --json`; returns the exit code and the findings.
fn validate(target: &Path, cni_path: &str) -> (i32, Vec<Value>) {
    let out = Command::new(CNITOOL)
        .args(["validate", "--json"])
        .arg(target)
        .env("CNI_PATH", cni_path)
        .env("NETCONFPATH", "/nonexistent/va")
        .output()
        .unwrap();
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: not JSON ({e}): {}{}",
            target.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), findings.as_array().unwrap().clone())
}

/// A finding reduced to what the expectations name.
fn shape(finding: &Value) -> Value {
    json!({"severity": finding["severity"], "plugin": finding["pluginIndex"], "key": finding["key"]})
}

fn check_findings(name: &str, found: &[Value], expected: &[Value]) {
    let found_shapes: Vec<Value> = found.iter().map(shape).collect();
    let expected_shapes: Vec<Value> = expected.iter().map(shape_of_expected).collect();
    assert_eq!(found_shapes, expected_shapes, "{name}: {found:#?}");
    for (finding, want) in found.iter().zip(expected) {
        let message = finding["message"].as_str().unwrap();
        let part = want["message"].as_str().unwrap();
        assert!(message.contains(part), "{name}: {message:?} does not contain {part:?}");
        if let Some(suggestion) = want.get("suggestion") {
            assert_eq!(&finding["suggestion"], suggestion, "{name}");
        }
        assert!(finding["file"].as_str().unwrap().ends_with(name), "{name}: {finding}");
    }
}

fn shape_of_expected(want: &Value) -> Value {
    json!({"severity": want["severity"], "plugin": want["plugin"], "key": want["key"]})
}

fn expectations() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(fixtures().join("findings.expected")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_fixture_gives_exactly_its_findings() {
    let plugins = our_plugins();
    let cni_path = plugins.path().to_str().unwrap();
    let expected = expectations();
    let mut files: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "findings.expected")
        .collect();
    files.sort();
    assert!(files.len() >= 25, "{files:?}");
    let broken = files.iter().filter(|f| !f.starts_with("valid-")).count();
    assert!(broken >= 20, "only {broken} broken fixtures");
    for name in &files {
        let want = expected.get(name).unwrap_or_else(|| panic!("{name}: no entry in findings.expected"));
        let want = want.as_array().unwrap();
        let (code, found) = validate(&fixtures().join(name), cni_path);
        check_findings(name, &found, want);
        let errors = want.iter().any(|w| w["severity"] == "error");
        assert_eq!(code, i32::from(errors), "{name}: exit status");
        if !name.starts_with("valid-") {
            assert!(!want.is_empty(), "{name}: a broken fixture must expect a finding");
        }
    }
    assert_eq!(expected.len(), files.len(), "findings.expected names a file that is not there");
}

#[test]
fn a_directory_is_checked_file_by_file_as_libcni_finds_them() {
    let plugins = our_plugins();
    let dir = tempfile::Builder::new().prefix("va-netd").tempdir().unwrap();
    for name in ["valid-podman.conflist", "mtu-out-of-range.conflist", "single-plugin-typo.conf"] {
        std::fs::copy(fixtures().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("README.md"), "not a configuration").unwrap();
    let (code, found) = validate(dir.path(), plugins.path().to_str().unwrap());
    assert_eq!(code, 1);
    let files: Vec<&str> = found.iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert_eq!(files.len(), 2, "{found:#?}");
    assert!(files[0].ends_with("mtu-out-of-range.conflist") && files[1].ends_with("single-plugin-typo.conf"));
}

#[test]
fn text_output_usage_and_exit_statuses() {
    let plugins = our_plugins();
    let run = |args: &[&str]| {
        Command::new(CNITOOL)
            .args(args)
            .env("CNI_PATH", plugins.path())
            .env("NETCONFPATH", fixtures())
            .output()
            .unwrap()
    };
    let valid = fixtures().join("case-only-key.conflist");
    let out = run(&["validate", valid.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "notes are not errors");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("note: `IPMasq`"), "{text}");
    assert!(text.contains("0 error(s), 0 warning(s), 1 note(s)"), "{text}");

    // An unknown key is a warning (every plugin ignores it): status 0, with its suggestion.
    let typo = fixtures().join("unknown-key-typo.conflist");
    let out = run(&["validate", typo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning: `isGatway`: unknown key") && text.contains("(did you mean `isGateway`?)")
    );
    assert!(text.contains("0 error(s), 1 warning(s)"), "{text}");

    let broken = fixtures().join("mtu-out-of-range.conflist");
    let out = run(&["validate", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 error(s) found"));

    // A network name is looked up in NETCONFPATH, as the other commands do.
    let out = run(&["validate", "va-mtu"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("invalid mtu 5"));

    assert_eq!(run(&["validate"]).status.code(), Some(2));
    assert_eq!(run(&["validate", "a", "b"]).status.code(), Some(2));
    assert_eq!(run(&["validate", "--bogus", "x"]).status.code(), Some(2));
    let out = run(&["validate", "/nonexistent/va.conflist"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file or directory"));
    // With --json the reason is a finding too.
    let (code, found) = validate(Path::new("/nonexistent/va.conflist"), plugins.path().to_str().unwrap());
    assert_eq!(code, 1);
    assert_eq!(shape(&found[0]), json!({"severity": "error", "plugin": null, "key": null}));
    assert!(found[0]["message"].as_str().unwrap().contains("no such file or directory"));
}

/// Real-world lists every plugin accepts pass with warnings for their unknown keys, in
/// text and JSON; a gateway outside its subnet and a chained plugin first are errors
/// naming the key and the plugin.
#[test]
fn unknown_keys_warn_and_chain_or_gateway_mistakes_are_errors() {
    let plugins = our_plugins();
    let cni_path = plugins.path().to_str().unwrap();
    for (name, key) in [("valid-minikube-bridge.conflist", "addIf"), ("valid-spec-example.conflist", "keyA")]
    {
        let (code, found) = validate(&fixtures().join(name), cni_path);
        assert_eq!(code, 0, "{name}: {found:#?}");
        assert_eq!(found.len(), 1, "{name}: {found:#?}");
        assert_eq!(shape(&found[0]), json!({"severity": "warning", "plugin": 0, "key": key}));
        let out = Command::new(CNITOOL)
            .args(["validate"])
            .arg(fixtures().join(name))
            .env("CNI_PATH", cni_path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(&format!("warning: `{key}`: unknown key")), "{text}");
        assert!(text.contains("0 error(s), 1 warning(s)"), "{text}");
    }

    let (code, found) = validate(&fixtures().join("gateway-outside-subnet.conflist"), cni_path);
    assert_eq!(code, 1);
    assert_eq!(
        found.iter().map(shape).collect::<Vec<_>>(),
        [json!({"severity": "error", "plugin": 0, "key": "ipam.ranges[0][0].gateway"})]
    );
    let (code, found) = validate(&fixtures().join("tuning-first.conflist"), cni_path);
    assert_eq!(code, 1);
    assert_eq!(
        found.iter().map(shape).collect::<Vec<_>>(),
        [json!({"severity": "error", "plugin": 0, "key": "type"})]
    );
    assert_eq!(found[0]["pluginType"], "tuning");
    assert!(found[0]["message"].as_str().unwrap().contains("prevResult"), "{found:#?}");
}

/// Against Debian's Go plugins: types ours has and Go lacks are missing, a 1.1.0 list is
/// beyond what Go's plugins speak, and a plugin that is not ours gets no key, value or
/// capability findings — only the checks that need no configuration types.
#[test]
fn against_the_go_plugins_directory() {
    if !Path::new(GO_PLUGINS).join("bridge").exists() {
        eprintln!("skipped: no Go reference plugins in {GO_PLUGINS}");
        return;
    }
    let dir = tempfile::Builder::new().prefix("va-go").tempdir().unwrap();
    // A plugin type that is not ours: Go's bridge under another name (it answers VERSION).
    let foreign = dir.path().join("bin");
    std::fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::symlink(Path::new(GO_PLUGINS).join("bridge"), foreign.join("va-foreign")).unwrap();
    let cni_path = format!("{GO_PLUGINS}:{}", foreign.display());

    let list = dir.path().join("go.conflist");
    let conflist = json!({"cniVersion": "1.0.0", "name": "va-go", "plugins": [
        {"type": "bridge", "bridge": "va-br0", "isGatway": true, "ipam": {"type": "etcd-ipam"}},
        {"type": "dummy", "ipam": {"type": "host-local", "subnet": "10.89.0.0/24"}},
        {"type": "tap"},
        {"type": "va-foreign", "anyKey": {"deep": 1}, "capabilities": {"anything": true}, "mtu": "not checked"},
        {"type": "portmap", "capabilities": {"portMappings": true}},
    ]});
    std::fs::write(&list, serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
    let (code, found) = validate(&list, &cni_path);
    assert_eq!(code, 1);
    let shapes: Vec<Value> = found.iter().map(shape).collect();
    assert_eq!(
        shapes,
        vec![
            json!({"severity": "error", "plugin": 0, "key": "ipam.type"}),
            json!({"severity": "warning", "plugin": 0, "key": "isGatway"}),
            json!({"severity": "error", "plugin": 0, "key": null}),
            json!({"severity": "error", "plugin": 1, "key": null}),
            json!({"severity": "error", "plugin": 2, "key": null}),
        ],
        "{found:#?}"
    );
    assert!(found[0]["message"].as_str().unwrap().contains("\"etcd-ipam\" not found"));
    assert!(found[3]["message"].as_str().unwrap().contains("\"dummy\" not found"));
    assert!(found[4]["message"].as_str().unwrap().contains("\"tap\" not found"));

    // Go's plugins speak up to 1.0.0: a 1.1.0 list is refused for each, with the newest
    // version they do speak as the suggestion; ours speak it.
    let newer = dir.path().join("newer.conflist");
    let conflist = json!({"cniVersion": "1.1.0", "name": "va-newer", "plugins": [
        {"type": "bridge", "bridge": "va-br0", "ipam": {"type": "host-local", "subnet": "10.89.0.0/24"}},
        {"type": "portmap", "capabilities": {"portMappings": true}},
    ]});
    std::fs::write(&newer, serde_json::to_vec_pretty(&conflist).unwrap()).unwrap();
    let (code, found) = validate(&newer, GO_PLUGINS);
    assert_eq!(code, 1);
    let about: Vec<(Value, Value)> =
        found.iter().map(|f| (f["pluginIndex"].clone(), f["key"].clone())).collect();
    assert_eq!(about, vec![(json!(0), Value::Null), (json!(0), json!("ipam.type")), (json!(1), Value::Null)]);
    for finding in &found {
        assert!(
            finding["message"].as_str().unwrap().contains("does not support cniVersion 1.1.0"),
            "{finding}"
        );
        assert_eq!(finding["suggestion"], "1.0.0");
    }
    let ours = our_plugins();
    let (code, found) = validate(&newer, ours.path().to_str().unwrap());
    assert_eq!((code, found), (0, vec![]));
}

/// A conflist from someone else (a pull request a CI job validates): keys with terminal
/// escapes are printed escaped, a huge key gets no did-you-mean, a huge file is not
/// loaded, and a network defined twice is reported where libcni would ignore it.
#[test]
fn hostile_files_are_reported_safely() {
    let plugins = our_plugins();
    let dir = tempfile::Builder::new().prefix("va-hostile").tempdir().unwrap();
    let long_key = "k".repeat(100_000);
    let conflist = json!({"cniVersion": "1.0.0", "name": "va-hostile", "plugins": [
        {"type": "bridge", "bridge": "va-br0", "\u{1b}[2Jmtu": 1, long_key.clone(): 1,
         "ipam": {"type": "host-local", "subnet": "10.90.0.0/24"}},
    ]});
    std::fs::write(dir.path().join("10-hostile.conflist"), serde_json::to_vec(&conflist).unwrap()).unwrap();
    let shadowed = json!({"cniVersion": "1.0.0", "name": "va-hostile", "plugins": [{"type": "loopback"}]});
    std::fs::write(dir.path().join("20-shadowed.conflist"), serde_json::to_vec(&shadowed).unwrap()).unwrap();
    let mut huge =
        b"{\"cniVersion\":\"1.0.0\",\"name\":\"va-huge\",\"plugins\":[{\"type\":\"loopback\"}],\"pad\":\""
            .to_vec();
    huge.resize(2 << 20, b'x');
    huge.extend_from_slice(b"\"}");
    std::fs::write(dir.path().join("30-huge.conflist"), huge).unwrap();

    let (code, found) = validate(dir.path(), plugins.path().to_str().unwrap());
    assert_eq!(code, 1);
    let about: Vec<(String, Value)> = found
        .iter()
        .map(|f| (f["file"].as_str().unwrap().rsplit('/').next().unwrap().to_string(), f["key"].clone()))
        .collect();
    let key = |k: &str| json!(k);
    assert_eq!(
        about,
        vec![
            ("10-hostile.conflist".into(), key("\u{1b}[2Jmtu")),
            ("10-hostile.conflist".into(), key(&long_key)),
            ("20-shadowed.conflist".into(), key("name")),
            ("30-huge.conflist".into(), Value::Null),
        ]
    );
    assert_eq!(found[1]["suggestion"], Value::Null, "no did-you-mean for a 100000-byte key");
    assert_eq!(found[2]["severity"], "warning");
    assert!(found[2]["message"].as_str().unwrap().contains("10-hostile.conflist"));
    assert!(found[3]["message"].as_str().unwrap().contains("not loaded"));

    let out = Command::new(CNITOOL)
        .arg("validate")
        .arg(dir.path())
        .env("CNI_PATH", plugins.path())
        .output()
        .unwrap();
    assert!(!out.stdout.contains(&0x1b), "an escape byte reached the terminal");
    assert!(String::from_utf8_lossy(&out.stdout).contains("`\\u{1b}[2Jmtu`"));
}

/// Every fixture validated inside a throwaway namespace (with an `eth0`, the master the
/// macvlan, ipvlan and vlan fixtures name) leaves its links, addresses, routes, rules,
/// qdiscs and nftables ruleset exactly as they were: the dry stages touch nothing.
#[test]
fn validating_changes_nothing_in_the_network() {
    cni_testkit::ns::require_root();
    let plugins = our_plugins();
    let ns = cni_testkit::ns::TestNetns::with_prefix("va").unwrap();
    let ip = |args: &[&str]| assert!(ns.command("ip").args(args).status().unwrap().success(), "ip {args:?}");
    ip(&["link", "add", "eth0", "type", "veth", "peer", "name", "va-peer"]);
    ip(&["addr", "add", "10.91.0.1/24", "dev", "eth0"]);
    ip(&["link", "set", "eth0", "up"]);
    let scope = cni_testkit::snapshot::Scope::new().netns("va", &ns);
    let before = scope.take();
    let out = ns
        .command(CNITOOL)
        .args(["validate", "--json"])
        .arg(fixtures())
        .env("CNI_PATH", plugins.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let found: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(found.len() >= 25, "{found:#?}");
    assert_eq!(before.diff(&scope.take()), Vec::<String>::new());
}

/// Corpus cases a plugin refuses only when it looks at the host (a link that is absent,
/// an MTU above the master's, a sysctl the kernel lacks) or only past its configuration
/// stage: validate, which looks at nothing, cannot see them. Exactly these are missed; a
/// configuration stage that learns one makes this test ask for the entry's removal.
const SEEN_ONLY_AT_ADD: &[(&str, &str)] = &[
    ("host-device", "device absent"),
    ("host-device", "device with a slash"),
    ("vlan", "master absent"),
    ("vlan", "master with NUL"),
    ("macvlan", "master absent"),
    ("macvlan", "master with a slash"),
    ("macvlan", "mtu above the master's"),
    ("ipvlan", "master absent"),
    ("ipvlan", "master with a slash"),
    ("tap", "bridge absent"),
    ("tuning", "sysctl key dot-dot"),
    ("tuning", "sysctl key unknown"),
    ("bridge", "ipam missing"),
];

/// The configuration-only cases of the plugins' bad-input corpus
/// (`crates/cni-plugins/tests/bad_input/`: an ADD refused with code 7 for a changed key,
/// no environment, raw stdin or runtime-supplied `prevResult`/`runtimeConfig` involved),
/// each as the one plugin of a conflist: validate reports an error naming what the
/// plugin's own refusal names.
#[test]
fn the_bad_input_corpus_configuration_cases_are_all_found() {
    let plugins = our_plugins();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cni-plugins/tests/bad_input");
    let data = tempfile::Builder::new().prefix("va-data").tempdir().unwrap();
    let dir = tempfile::Builder::new().prefix("va-corpus").tempdir().unwrap();
    let load = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(corpus.join(file)).unwrap()).unwrap()
    };
    let mut checked = 0;
    let mut missed = Vec::new();
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let table = load(&file);
        if table["base"].is_null() {
            continue; // a shared table, applied through a plugin's `include`
        }
        let mut cases = table["cases"].as_array().unwrap().clone();
        for include in table["include"].as_array().into_iter().flatten() {
            cases.extend(load(include.as_str().unwrap())["cases"].as_array().unwrap().clone());
        }
        let plugin_type = table["base"]["type"].as_str().unwrap().to_string();
        for case in cases {
            let config_only =
                ["env", "unset", "stdin", "generate", "except"].iter().all(|k| case.get(*k).is_none());
            let add = case.get("verb").is_none_or(|v| v == "ADD");
            let changed = case["set"].as_object().into_iter().flatten().map(|(k, _)| k.as_str());
            let changed: Vec<&str> = changed
                .chain(case["remove"].as_array().into_iter().flatten().filter_map(Value::as_str))
                .collect();
            let from_runtime =
                changed.iter().any(|p| p.starts_with("/prevResult") || p.starts_with("/runtimeConfig"));
            if !(config_only && add && case["code"] == 7) || from_runtime {
                continue;
            }
            let base = table["base"].to_string().replace("@DATA@", data.path().to_str().unwrap());
            let mut conf: Value = serde_json::from_str(&base).unwrap();
            for (pointer, value) in case["set"].as_object().into_iter().flatten() {
                cni_testkit::json_pointer::set(&mut conf, pointer, value.clone());
            }
            for pointer in case["remove"].as_array().into_iter().flatten() {
                cni_testkit::json_pointer::remove(&mut conf, pointer.as_str().unwrap());
            }
            let list = json!({"cniVersion": conf["cniVersion"], "name": conf["name"], "plugins": [conf]});
            let path = dir.path().join("case.conflist");
            std::fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
            let (code, found) = validate(&path, plugins.path().to_str().unwrap());
            let wanted: Vec<String> = case["msg"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m.as_str().unwrap().to_lowercase())
                .collect();
            let named = found.iter().any(|f| {
                let text = format!("{} {}", f["message"], f["key"]).to_lowercase();
                f["severity"] == "error" && wanted.iter().all(|w| text.contains(w))
            });
            checked += 1;
            let name = case["name"].as_str().unwrap().to_string();
            if code != 1 || !named {
                missed.push((plugin_type.clone(), name));
            } else {
                let listed = SEEN_ONLY_AT_ADD.iter().any(|(t, n)| *t == plugin_type && *n == name);
                assert!(!listed, "{plugin_type}: {name:?} is found now: remove it from SEEN_ONLY_AT_ADD");
            }
        }
    }
    assert!(checked >= 200, "only {checked} configuration cases in the corpus");
    missed.sort();
    let mut expected: Vec<(String, String)> =
        SEEN_ONLY_AT_ADD.iter().map(|(t, n)| (t.to_string(), n.to_string())).collect();
    expected.sort();
    assert_eq!(missed, expected, "corpus cases validate misses, of {checked}");
}
