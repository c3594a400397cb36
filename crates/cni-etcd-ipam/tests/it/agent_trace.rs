//! A failed request is logged with the runtime's trace id the plugin passed on, so the
//! agent's side of one pod's setup can be found from its trace; an id that is not a
//! well-formed trace id never reaches the log.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A DEL whose etcd (port 9, discard) never answers as etcd: the agent fails it at once.
fn failing_del(trace: &str) -> String {
    failing_del_of("ctr/eth0", trace)
}

fn failing_del_of(handle: &str, trace: &str) -> String {
    let config = serde_json::json!({
        "cniVersion": "1.0.0", "name": "trnet", "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": ["http://127.0.0.1:9"], "node": "tr-node",
                 "pools": ["10.98.0.0/16"], "timeoutMs": 200}});
    format!("{}\n", serde_json::json!({"op": "del", "config": config, "handle": handle, "trace": trace}))
}

#[test]
fn a_failure_is_logged_with_the_trace_id_the_plugin_sent() {
    let dir = tempfile::Builder::new().prefix("tr-agent").tempdir().unwrap();
    let socket = dir.path().join("run/agent.sock");
    let log_path = dir.path().join("agent.log");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_etcd-ipam"))
        .args(["agent", "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    cni_testkit::socket_attack::wait_for_socket(&socket);
    let ask = |line: &str| {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).unwrap();
        answer
    };
    let answer = ask(&failing_del(TRACE_ID));
    assert!(answer.contains("\"code\""), "the DEL was expected to fail: {answer}");
    let hostile = "\u{1b}[2Jforged (trace 00000000000000000000000000000001)";
    let answer = ask(&failing_del(hostile));
    assert!(answer.contains("\"code\""), "{answer}");
    // A handle that tries to start a log line of its own stays inside its quoted field.
    let forged_line = "ctr\nFORGED ERROR etcd-ipam[1]: the agent is down";
    let answer = ask(&failing_del_of(forged_line, TRACE_ID));
    assert!(answer.contains("\"code\""), "{answer}");

    // Both answers are back, so both lines were written before; the loop only waits for
    // the file system to show them to another reader.
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if log.matches("failed").count() >= 3 || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = agent.kill();
    let _ = agent.wait();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("failed")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(
        lines[0].contains(r#"request failed op="del" handle="ctr/eth0""#)
            && lines[0].ends_with(&format!("trace=\"{TRACE_ID}\"")),
        "{log}"
    );
    assert!(!lines[1].contains("trace") && !log.contains('\u{1b}'), "a malformed trace id was logged: {log}");
    assert!(lines[2].contains(r#"handle="ctr\nFORGED"#), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("FORGED")), "the handle forged a log line: {log}");
}
