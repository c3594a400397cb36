//! Running plugins: lookup, timeouts that kill the whole process group, and how failures
//! are reported.

use crate::support::Rig;
use libcni::{Error, RuntimeConf};
use serde_json::json;
use std::time::{Duration, Instant};

fn rt() -> RuntimeConf {
    RuntimeConf::new("ctr", "/run/netns/x", "eth0")
}

fn one_plugin(rig: &Rig, plugin: serde_json::Value) -> libcni::NetworkConfigList {
    rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [plugin]}))
}

#[test]
fn a_sleeping_plugin_is_killed_at_the_timeout() {
    let rig = Rig::new();
    rig.plugin("slow");
    let list = one_plugin(&rig, json!({"type": "slow", "testBehaviour": {"sleepMs": 20000}}));
    let started = Instant::now();
    let err = rig.cni.add_network_list(&list, &rt().with_timeout(Duration::from_millis(400))).unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(&err, Error::Timeout { plugin_type, command, .. } if plugin_type == "slow" && command == "ADD"),
        "{err}"
    );
    // Not before the timeout. That it was the timeout that ended the call (the plugin
    // would sleep 20 s and then succeed) is what the Timeout error says.
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    let pid = rig.log()[0].pid;
    assert!(gone_soon(pid), "the plugin process {pid} is still alive");
}

#[test]
fn the_timeout_kills_what_the_plugin_started_too() {
    let rig = Rig::new();
    let pidfile = rig.dir.path().join("grandchild.pid");
    // The backgrounded sleep keeps stdout open and would outlive a plain kill of the shell.
    rig.script("forker", &format!("#!/bin/sh\nsleep 30 &\necho $! > '{}'\nsleep 30\n", pidfile.display()));
    let list = one_plugin(&rig, json!({"type": "forker"}));
    let cni = rig.cni.clone().with_timeout(Duration::from_millis(500));
    let err = cni.add_network_list(&list, &rt()).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let grandchild: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(gone_soon(grandchild), "the plugin's child {grandchild} survived the timeout");
}

/// True when `pid` is gone (or a zombie) within 20 s: a killed process goes at once, the
/// limit only tells "never" apart without letting a loaded machine fail the test.
fn gone_soon(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) => {
                return true
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    false
}

#[test]
fn the_deadline_covers_the_whole_chain() {
    let rig = Rig::new();
    rig.plugin("a").plugin("b");
    let list = rig.list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "a", "testBehaviour": {"sleepMs": 600}}, {"type": "b", "testBehaviour": {"sleepMs": 600}}]}));
    // Each plugin alone fits in the limit; the two together do not.
    let err = rig.cni.add_network_list(&list, &rt().with_timeout(Duration::from_millis(1000))).unwrap_err();
    assert!(matches!(&err, Error::Timeout { plugin_type, .. } if plugin_type == "b"), "{err}");
}

#[test]
fn errors_come_from_stdout_json_else_stderr() {
    let rig = Rig::new();
    rig.plugin("p");
    let cases = [
        (json!({"error": {"code": 7, "msg": "bad subnet", "details": "10.0.0.0/33"}}), "bad subnet"),
        (json!({"exitCode": 1, "stderr": "segfault-ish trouble\n"}), "segfault-ish trouble"),
        (json!({"exitCode": 2, "stdout": "oops not json", "stderr": "and some stderr"}), "oops not json"),
        (json!({"exitCode": 3}), "no output"),
    ];
    for (behaviour, needle) in cases {
        let list = one_plugin(&rig, json!({"type": "p", "testBehaviour": behaviour}));
        let err = rig.cni.add_network_list(&list, &rt()).unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.to_string().contains("\"p\""), "the error names the plugin: {err}");
    }
    let list = one_plugin(
        &rig,
        json!({"type": "p", "testBehaviour": {"error": {"code": 7, "msg": "bad subnet", "details": "10.0.0.0/33"}}}),
    );
    let err = rig.cni.add_network_list(&list, &rt()).unwrap_err();
    let e = err.plugin_error().expect("a plugin error object");
    assert_eq!((e.code, e.msg.as_str(), e.details.as_str()), (7, "bad subnet", "10.0.0.0/33"));
    let list = one_plugin(&rig, json!({"type": "p", "testBehaviour": {"exitCode": 2, "stderr": "x"}}));
    match rig.cni.add_network_list(&list, &rt()).unwrap_err() {
        Error::PluginFailed { status, .. } => assert_eq!(status, "exit status 2"),
        other => panic!("{other}"),
    }
}

#[test]
fn garbage_on_success_is_a_decode_error() {
    let rig = Rig::new();
    rig.plugin("p");
    for stdout in ["Hello, I am not JSON", "", "[1,2]", r#"{"cniVersion":"7.0.0"}"#] {
        let list = one_plugin(&rig, json!({"type": "p", "testBehaviour": {"exitCode": 0, "stdout": stdout}}));
        let err = rig.cni.add_network_list(&list, &rt()).unwrap_err();
        assert!(matches!(err, Error::Decode { .. } | Error::ResultConversion { .. }), "{stdout:?}: {err}");
        assert!(err.to_string().contains("\"p\""), "{err}");
    }
}

#[test]
fn plugin_lookup_follows_the_path_order_and_refuses_escapes() {
    let rig = Rig::new();
    let second = rig.dir.path().join("second-bin");
    std::fs::create_dir(&second).unwrap();
    rig.plugin("p");
    std::fs::write(second.join("p"), "#!/bin/sh\nexit 1\n").unwrap();
    let cni = libcni::CniConfig::new([rig.bin.clone(), second.clone()]);
    assert_eq!(cni.find_plugin("p").unwrap(), rig.bin.join("p"));
    std::fs::create_dir(rig.dir.path().join("bin/dir-not-file")).unwrap();
    assert!(matches!(cni.find_plugin("dir-not-file"), Err(Error::PluginNotFound { .. })));
    for escape in ["../bin/p", "/bin/sh", "..", ""] {
        assert!(matches!(cni.find_plugin(escape), Err(Error::InvalidPluginType(_))), "{escape:?}");
    }
    let list = one_plugin(&rig, json!({"type": "missing"}));
    let err = rig.cni.add_network_list(&list, &rt()).unwrap_err();
    assert!(matches!(err, Error::PluginNotFound { .. }), "{err}");
    assert!(err.to_string().contains("missing"));
}

#[test]
fn the_plugin_sees_the_callers_environment_but_only_our_cni_variables() {
    let rig = Rig::new();
    let out = rig.dir.path().join("env.txt");
    rig.script(
        "envdump",
        &format!("#!/bin/sh\nenv > '{}'\necho '{{\"cniVersion\":\"1.0.0\"}}'\n", out.display()),
    );
    let list = one_plugin(&rig, json!({"type": "envdump"}));
    rig.cni.add_network_list(&list, &rt()).unwrap();
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "PATH is inherited");
    assert!(env.lines().any(|l| l == "CNI_ARGS="));
    assert!(env.lines().any(|l| l == "CNI_COMMAND=ADD"));
}

#[test]
fn a_plugin_being_written_is_retried_until_it_can_run() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let rig = Rig::new();
    let path = rig.bin.join("installing");
    // Hold the plugin open for writing, as an installer would: exec gets ETXTBSY until the
    // file is closed.
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).open(&path).unwrap();
    file.write_all(b"#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\"}'\n").unwrap();
    let installer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(file);
    });
    let list = one_plugin(&rig, json!({"type": "installing"}));
    let started = Instant::now();
    let result = rig.cni.add_network_list(&list, &rt());
    installer.join().unwrap();
    result.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150), "the first attempts were busy");
}

#[test]
fn a_plugin_killed_by_a_signal_is_reported_as_such() {
    let rig = Rig::new();
    rig.script("suicidal", "#!/bin/sh\nkill -9 $$\n");
    let list = one_plugin(&rig, json!({"type": "suicidal"}));
    match rig.cni.add_network_list(&list, &rt()).unwrap_err() {
        Error::PluginFailed { status, .. } => assert_eq!(status, "killed by signal 9"),
        other => panic!("{other}"),
    }
}

#[test]
fn large_input_and_output_never_deadlock() {
    let rig = Rig::new();
    // Ignores its (large) stdin and prints far more than a pipe buffer before the result.
    rig.script("chatty", "#!/bin/sh\nhead -c 1000000 /dev/zero | tr '\\0' ' '\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.9.9.9/24\"}]}'\n");
    let list = one_plugin(&rig, json!({"type": "chatty", "padding": "x".repeat(500_000)}));
    let result = rig.cni.add_network_list(&list, &rt().with_timeout(Duration::from_secs(20))).unwrap();
    assert_eq!(result.json["ips"][0]["address"], "10.9.9.9/24");
}

#[test]
fn a_plugin_flooding_its_output_fails_with_a_decode_error_naming_the_cap() {
    let rig = Rig::new();
    // 64 MiB of blanks before a valid result: JSON would accept it whole, but only the
    // first 16 MiB are kept (the rest is drained), so the run fails instead of holding it all.
    rig.script(
        "flood",
        "#!/bin/sh\nhead -c 67108864 /dev/zero | tr '\\0' ' '\necho '{\"cniVersion\":\"1.0.0\"}'\n",
    );
    let list = one_plugin(&rig, json!({"type": "flood"}));
    let err = rig.cni.add_network_list(&list, &rt().with_timeout(Duration::from_secs(60))).unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err}");
    assert!(err.to_string().contains("larger than the 16 MiB a plugin may print"), "{err}");
}

#[test]
fn every_plugin_run_carries_the_runtimes_trace_context() {
    let rig = Rig::new();
    rig.plugin("traced");
    let trace = libcni::TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("vendor=opaque"),
        Some("pod=web-1"),
    )
    .unwrap();
    let cni = rig.cni.clone().with_trace(trace.clone());
    let list = one_plugin(&rig, json!({"type": "traced"}));
    let rt = rt();
    cni.add_network_list(&list, &rt).unwrap();
    cni.check_network_list(&list, &rt).unwrap();
    cni.del_network_list(&list, &rt).unwrap();
    let list_v11 = rig.list(json!({"cniVersion": "1.1.0", "name": "n", "plugins": [{"type": "traced"}]}));
    cni.gc_network_list(&list_v11, &[]).unwrap();
    cni.status_network_list(&list_v11).unwrap();
    cni.get_version_info("traced").unwrap();

    let log = rig.log();
    let commands: Vec<&str> = log.iter().map(|inv| inv.command.as_str()).collect();
    assert_eq!(commands, ["ADD", "CHECK", "DEL", "GC", "STATUS", "VERSION"]);
    for inv in &log {
        assert_eq!(inv.var("TRACEPARENT"), trace.traceparent(), "{}", inv.command);
        assert_eq!(inv.var("TRACESTATE"), "vendor=opaque", "{}", inv.command);
        assert_eq!(inv.var("BAGGAGE"), "pod=web-1", "{}", inv.command);
    }
}
