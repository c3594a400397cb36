//! The scriptable test plugin does what it is told, and records what it was asked.

use cni_testkit::binaries::test_plugin;
use cni_testkit::runner::PluginCall;
use cni_testkit::test_plugin::{read_log, Behaviour};
use serde_json::{json, Value};

fn call(command: &str, conf: Value) -> PluginCall {
    PluginCall::new(test_plugin(), command).netns("/run/netns/none").config(&conf)
}

#[test]
fn returns_the_configured_result_converted_to_the_request_version() {
    let conf = json!({"cniVersion": "0.4.0", "name": "n", "type": "cni-test-plugin",
        "testBehaviour": {"result": {"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.2/24", "gateway": "10.9.0.1"}]}}});
    let out = call("ADD", conf).run().json();
    assert_eq!(
        out,
        json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.9.0.2/24", "gateway": "10.9.0.1"}]})
    );
}

#[test]
fn fails_with_the_configured_error_on_one_verb_only() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t",
        "testBehaviour": {"perCommand": {"DEL": {"error": {"code": 11, "msg": "busy", "details": "try later"}}}}});
    assert!(call("ADD", conf.clone()).run().success());
    let err = call("DEL", conf).run().error();
    assert_eq!((err.code, err.msg.as_str(), err.details.as_str()), (11, "busy", "try later"));
}

#[test]
fn raw_mode_prints_stdout_and_stderr_and_exits_with_the_code() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t",
        "testBehaviour": {"exitCode": 3, "stdout": "not json", "stderr": "something broke\n"}});
    let out = call("ADD", conf).run();
    assert_eq!((out.status, out.stdout.as_str(), out.stderr.as_str()), (3, "not json", "something broke\n"));
}

#[test]
fn echoes_prev_result() {
    let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}], "ips": [{"interface": 0, "address": "10.0.0.5/16"}]});
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "prevResult": prev, "testBehaviour": {"echoPrevResult": true}});
    assert_eq!(call("ADD", conf).run().json(), prev);
}

#[test]
fn panics_still_give_an_error_object() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "testBehaviour": {"panic": true}});
    assert_eq!(call("ADD", conf).run().error().code, 999);
}

#[test]
fn claims_the_versions_it_is_told_via_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.json");
    Behaviour { supported_versions: Some(vec!["0.3.1".into(), "0.4.0".into()]), ..Default::default() }
        .write_to(&file)
        .unwrap();
    let out =
        PluginCall::new(test_plugin(), "VERSION").env("CNI_TEST_BEHAVIOUR", file.display().to_string()).run();
    assert_eq!(out.json(), json!({"cniVersion": "1.1.0", "supportedVersions": ["0.3.1", "0.4.0"]}));
    // ...and refuses a config in a version it did not claim.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "debugFile": file});
    assert_eq!(call("ADD", conf).run().error().code, 1);
}

#[test]
fn sleeps_when_told() {
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "testBehaviour": {"sleepMs": 300}});
    let out = call("DEL", conf).run();
    assert!(out.success());
    assert!(out.elapsed.as_millis() >= 300, "{:?}", out.elapsed);
}

#[test]
fn records_every_invocation() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "logFile": log});
    call("ADD", conf.clone()).container_id("c-1").args("IgnoreUnknown=1;K=V").run().json();
    call("DEL", conf).container_id("c-1").ifname("net1").run();
    let calls = read_log(&log);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].command, "ADD");
    assert_eq!(calls[0].var("CNI_ARGS"), "IgnoreUnknown=1;K=V");
    assert_eq!(calls[0].stdin["name"], "n");
    assert_eq!((calls[1].command.as_str(), calls[1].var("CNI_IFNAME")), ("DEL", "net1"));
}

#[test]
fn a_hung_plugin_fails_its_one_call_naming_the_plugin_verb_and_limit() {
    let conf =
        json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "testBehaviour": {"sleepMs": 600_000}});
    let hung = call("ADD", conf).limit(std::time::Duration::from_millis(300));
    let mut pid = None;
    let failure =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hung.run_paused(|p| pid = Some(p))))
            .expect_err("a plugin sleeping ten minutes must fail its call at the limit");
    let message = failure.downcast_ref::<String>().expect("a formatted panic message");
    let expected = format!("plugin {} ADD did not finish within its limit of 300ms", test_plugin().display());
    assert!(message.contains(&expected), "{message}");
    assert!(message.contains("its process group was killed"), "{message}");
    // Killed and reaped: nothing of it is left, not even a zombie.
    let pid = pid.expect("the plugin started");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "plugin {pid} is still there");
}
