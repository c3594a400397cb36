//! The SDK's validation table (docs/compatibility.md, "Plugin environment, per verb"), one
//! test per rule, run against a real plugin binary built on the SDK (the `passthrough`
//! example).

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn example_binary() -> PathBuf {
    // Integration tests live in target/<profile>/deps; cargo builds examples next to it.
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let bin = deps.parent().unwrap().join("examples").join("passthrough");
    assert!(bin.exists(), "example plugin not built at {}", bin.display());
    bin
}

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net1","type":"passthrough"}"#;

struct Outcome {
    status: i32,
    stdout: String,
}

fn run(env: &[(&str, &str)], stdin: &str) -> Outcome {
    let mut child = Command::new(example_binary())
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // VERSION does not read stdin; ignore a closed pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    Outcome { status: out.status.code().unwrap(), stdout: String::from_utf8(out.stdout).unwrap() }
}

fn full_env(command: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", "ctr-1"),
        ("CNI_NETNS", "/var/run/netns/does-not-exist"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
}

fn with(
    mut env: Vec<(&'static str, &'static str)>,
    key: &'static str,
    value: &'static str,
) -> Vec<(&'static str, &'static str)> {
    env.retain(|(k, _)| *k != key);
    env.push((key, value));
    env
}

fn without(mut env: Vec<(&'static str, &'static str)>, keys: &[&str]) -> Vec<(&'static str, &'static str)> {
    env.retain(|(k, _)| !keys.contains(k));
    env
}

/// Asserts a CNI error: exit 1, stdout one valid error object with `code`. Returns it.
fn expect_error(outcome: Outcome, code: u64) -> Value {
    assert_eq!(outcome.status, 1, "stdout: {}", outcome.stdout);
    let err: Value =
        serde_json::from_str(&outcome.stdout).unwrap_or_else(|e| panic!("{e}: {}", outcome.stdout));
    assert_eq!(err["code"], code, "{err}");
    assert!(err["msg"].as_str().is_some_and(|m| !m.is_empty()), "{err}");
    err
}

#[test]
fn version_matches_the_reference_byte_for_byte() {
    let out = run(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(out.status, 0);
    assert_eq!(
        out.stdout,
        "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n"
    );
}

#[test]
fn version_has_the_same_shape_as_the_go_plugins() {
    // The Debian Go plugins (an older release) speak up to 1.0.0; apart from the version
    // list, our answer must be the same bytes.
    let go = std::path::Path::new("/usr/lib/cni/loopback");
    assert!(
        go.exists(),
        "the Go reference plugins are not installed (apt-get install containernetworking-plugins)"
    );
    let go_out =
        Command::new(go).env_clear().env("CNI_COMMAND", "VERSION").stdin(Stdio::null()).output().unwrap();
    let go_text = String::from_utf8(go_out.stdout).unwrap();
    let ours = run(&[("CNI_COMMAND", "VERSION")], "").stdout;
    let normalise =
        |s: &str| s.replace(",\"1.1.0\"", "").replace("\"cniVersion\":\"1.1.0\"", "\"cniVersion\":\"1.0.0\"");
    assert_eq!(normalise(&ours), go_text);
}

#[test]
fn all_missing_variables_are_reported_together_with_code_4() {
    let err = expect_error(run(&[("CNI_COMMAND", "ADD")], CONF), 4);
    assert_eq!(err["msg"], "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing");
}

#[test]
fn del_does_not_need_a_netns() {
    let out = run(&without(full_env("DEL"), &["CNI_NETNS"]), CONF);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let err = expect_error(run(&without(full_env("DEL"), &["CNI_NETNS", "CNI_IFNAME"]), CONF), 4);
    assert_eq!(err["msg"], "required env variables [CNI_IFNAME] missing");
}

#[test]
fn gc_and_status_need_only_command_and_path() {
    let conf = r#"{"cniVersion":"1.1.0","name":"net1","type":"passthrough"}"#;
    for verb in ["GC", "STATUS"] {
        let out = run(&[("CNI_COMMAND", verb), ("CNI_PATH", "/opt/cni/bin")], conf);
        assert_eq!(out.status, 0, "{verb}: {}", out.stdout);
        let err = expect_error(run(&[("CNI_COMMAND", verb)], conf), 4);
        assert_eq!(err["msg"], "required env variables [CNI_PATH] missing");
    }
}

#[test]
fn version_needs_only_the_command() {
    assert_eq!(run(&[("CNI_COMMAND", "VERSION")], "").status, 0);
}

#[test]
fn missing_command_is_code_4() {
    expect_error(run(&without(full_env("ADD"), &["CNI_COMMAND"]), CONF), 4);
}

#[test]
fn unknown_command_is_code_4() {
    let err = expect_error(run(&full_env("FROB"), CONF), 4);
    assert_eq!(err["msg"], "unknown CNI_COMMAND: FROB");
}

#[test]
fn invalid_container_id_is_code_4() {
    for bad in ["-leading-dash", "has space", "a/b"] {
        let env = with(full_env("ADD"), "CNI_CONTAINERID", bad);
        expect_error(run(&env, CONF), 4);
    }
}

#[test]
fn invalid_interface_names_are_code_4() {
    for bad in [".", "..", "sixteen-chars-xx", "a/b", "a:b", "a b"] {
        let env = with(full_env("ADD"), "CNI_IFNAME", bad);
        let err = expect_error(run(&env, CONF), 4);
        assert!(err["msg"].as_str().unwrap().contains("interface name"), "{err}");
    }
}

#[test]
fn bad_json_is_code_6() {
    expect_error(run(&full_env("ADD"), "{not json"), 6);
}

#[test]
fn missing_or_invalid_network_name_is_code_7() {
    let err = expect_error(run(&full_env("ADD"), r#"{"cniVersion":"1.0.0","type":"passthrough"}"#), 7);
    assert_eq!(err["msg"], "missing network name");
    expect_error(run(&full_env("ADD"), r#"{"cniVersion":"1.0.0","name":"bad/name","type":"x"}"#), 7);
}

#[test]
fn unsupported_config_version_is_code_1_listing_supported_versions() {
    let err = expect_error(run(&full_env("ADD"), r#"{"cniVersion":"0.9.0","name":"n","type":"x"}"#), 1);
    let details = err["details"].as_str().unwrap();
    assert!(details.contains("0.9.0") && details.contains("1.1.0") && details.contains("0.1.0"), "{err}");
}

#[test]
fn empty_config_version_means_0_1_0() {
    let out = run(&without(full_env("ADD"), &["CNI_NETNS"]), r#"{"name":"n","type":"x"}"#);
    // 0.1.0 is supported; ADD still needs CNI_NETNS: the version is not the problem.
    let err = expect_error(out, 4);
    assert!(err["msg"].as_str().unwrap().contains("CNI_NETNS"));
}

#[test]
fn check_below_0_4_0_is_code_1() {
    let err = expect_error(run(&full_env("CHECK"), r#"{"cniVersion":"0.3.1","name":"n","type":"x"}"#), 1);
    assert_eq!(err["msg"], "config version does not allow CHECK");
}

#[test]
fn gc_and_status_below_1_1_0_are_code_1() {
    for verb in ["GC", "STATUS"] {
        let err = expect_error(run(&full_env(verb), CONF), 1);
        assert_eq!(err["msg"], format!("config version does not allow {verb}"));
    }
}

#[test]
fn netns_that_is_the_plugins_own_is_code_8_unless_overridden() {
    let own = "/proc/self/ns/net";
    let err = expect_error(run(&with(full_env("ADD"), "CNI_NETNS", own), CONF), 8);
    assert_eq!(err["cniVersion"], "1.0.0");
    let env = with(with(full_env("ADD"), "CNI_NETNS", own), "CNI_NETNS_OVERRIDE", "1");
    assert_eq!(run(&env, CONF).status, 0);
}

#[test]
fn bad_cni_args_is_code_4() {
    for args in ["IP", ";;;", "IgnoreUnknown=1;;K=V", "K=V;", "=V"] {
        let err = expect_error(run(&with(full_env("ADD"), "CNI_ARGS", args), CONF), 4);
        assert!(err["msg"].as_str().unwrap().contains("CNI_ARGS"), "{args}: {err}");
    }
}

#[test]
fn add_prints_the_result_in_the_requested_version() {
    let conf = r#"{"cniVersion":"0.2.0","name":"n","type":"x","prevResult":{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"}}}"#;
    let out = run(&full_env("ADD"), conf);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}));
    // 0.2.0 cannot express a result without addresses: a version error, not a crash.
    let empty = r#"{"cniVersion":"0.2.0","name":"n","type":"x"}"#;
    expect_error(run(&full_env("ADD"), empty), 1);
}

#[test]
fn unreadable_stdin_is_code_5() {
    // A directory as stdin: read(2) fails with EISDIR.
    let out = Command::new(example_binary())
        .env_clear()
        .envs(full_env("ADD"))
        .stdin(std::fs::File::open("/").unwrap())
        .output()
        .unwrap();
    let outcome =
        Outcome { status: out.status.code().unwrap(), stdout: String::from_utf8(out.stdout).unwrap() };
    let err = expect_error(outcome, 5);
    assert!(err["msg"].as_str().unwrap().contains("stdin"), "{err}");
}
