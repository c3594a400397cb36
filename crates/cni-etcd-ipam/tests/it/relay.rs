//! The plugin binary's relay (`cni_os::relay`): before libc starts, an ADD or DEL whose
//! configuration names an agent is handed to the agent whole (variables and stdin), and
//! the agent's answer is printed as it is. Whatever the relay cannot carry, or an agent
//! that does not answer in the relay's shape, gets the full plugin, with stdin intact.
//! Here the agent is a fake one that records what it is sent: the requests show which
//! path served. (The real agent behind the relay: `etcd_ipam::add_and_del_through_the_node_agent`.)

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::{json, Value};

/// A fake agent: each request line is recorded and answered with `answer(request)`.
struct FakeAgent {
    socket: PathBuf,
    requests: Arc<Mutex<Vec<Value>>>,
    _dir: tempfile::TempDir,
}

impl FakeAgent {
    fn start(answer: impl Fn(&Value) -> Vec<u8> + Send + 'static) -> FakeAgent {
        let (dir, socket, listener) = listening();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut line = String::new();
                if BufReader::new(&stream).read_line(&mut line).is_err() {
                    continue;
                }
                let request: Value = serde_json::from_str(&line).unwrap_or(Value::String(line));
                let reply = answer(&request);
                seen.lock().unwrap().push(request);
                let _ = stream.write_all(&reply);
            }
        });
        FakeAgent { socket, requests, _dir: dir }
    }

    fn ops(&self) -> Vec<String> {
        let requests = self.requests.lock().unwrap();
        requests.iter().map(|r| r["op"].as_str().unwrap_or("?").to_string()).collect()
    }

    fn last(&self) -> Value {
        self.requests.lock().unwrap().last().cloned().unwrap()
    }
}

/// A socket to play an agent on, in a directory of its own.
fn listening() -> (tempfile::TempDir, PathBuf, UnixListener) {
    let dir = tempfile::Builder::new().prefix("ed-relay").tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    (dir, socket, listener)
}

/// An old agent's answer to an ADD, in the protocol the full plugin speaks.
fn old_protocol_answer(request: &Value) -> Vec<u8> {
    match request["op"].as_str() {
        Some("add") => b"{\"address\":\"10.77.0.5/16\",\"gateway\":\"10.77.0.1\"}\n".to_vec(),
        Some("del") => b"{\"released\":null}\n".to_vec(),
        _ => b"{\"code\":6,\"msg\":\"etcd-ipam agent: unknown op\"}\n".to_vec(),
    }
}

fn conf(socket: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0", "name": "relaynet", "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "agentSocket": socket.display().to_string(),
                 "endpoints": ["http://127.0.0.1:9"], "nodeName": "relay-node",
                 "pools": ["10.77.0.0/16"], "timeoutMs": 250}
    })
}

fn call(command: &str, stdin: &[u8]) -> PluginCall {
    PluginCall::new(env!("CARGO_BIN_EXE_etcd-ipam"), command)
        .container_id("relayed")
        .netns("/var/run/netns/ed-relay-unused")
        .stdin(stdin.to_vec())
}

fn pretty(conf: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(conf).unwrap()
}

#[test]
fn add_and_del_are_handed_to_the_agent_whole_and_its_answer_printed_as_it_is() {
    let agent = FakeAgent::start(|_| cni_os::relay::answer(3, b"{\"made\":\"by the agent\"}\n", b"a line\n"));
    let config = conf(&agent.socket);
    let out = call("ADD", &pretty(&config))
        .env("TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .env("SECRET_OF_THE_RUNTIME", "not for the agent")
        .run();
    assert_eq!(
        (out.status, out.stdout.as_str(), out.stderr.as_str()),
        (3, "{\"made\":\"by the agent\"}\n", "a line\n")
    );
    let request = agent.last();
    assert_eq!(request["op"], "run");
    // The configuration arrives as it was (pretty-printed on stdin, one line on the socket).
    assert_eq!(request["config"], config);
    let env = request["env"].as_object().unwrap();
    assert_eq!(env["CNI_COMMAND"], "ADD");
    assert_eq!(env["CNI_CONTAINERID"], "relayed");
    assert_eq!(env["CNI_NETNS"], "/var/run/netns/ed-relay-unused");
    assert_eq!(env["TRACEPARENT"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert!(env.keys().all(|k| k.starts_with("CNI_") || k == "TRACEPARENT"), "{env:?}");

    let out = call("DEL", &pretty(&config)).run();
    assert_eq!(out.status, 3, "{out:?}");
    assert_eq!(agent.last()["env"]["CNI_COMMAND"], "DEL");
    assert_eq!(agent.ops(), ["run", "run"]);
}

/// The full plugin talked to the fake agent in the old protocol and printed its result.
fn served_by_the_full_plugin(out: &PluginOutput, agent: &FakeAgent, ops: &[&str]) {
    assert_eq!(out.json()["ips"][0]["address"], "10.77.0.5/16", "{out:?}");
    assert_eq!(agent.ops(), ops);
}

#[test]
fn what_the_relay_cannot_carry_goes_to_the_full_plugin_with_stdin_intact() {
    // The socket path written with an escape: only a full parser knows where it points.
    let agent = FakeAgent::start(old_protocol_answer);
    let escaped =
        String::from_utf8(pretty(&conf(&agent.socket))).unwrap().replace("/agent.sock", "\\/agent.sock");
    served_by_the_full_plugin(&call("ADD", escaped.as_bytes()).run(), &agent, &["add"]);

    // A configuration over the relay's 512 KiB: read in part, then all of it given back.
    let agent = FakeAgent::start(old_protocol_answer);
    let mut big = conf(&agent.socket);
    let padding: String = (0..700_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    big["padding"] = padding.clone().into();
    served_by_the_full_plugin(&call("ADD", &pretty(&big)).run(), &agent, &["add"]);
    assert_eq!(agent.last()["config"]["padding"], padding, "stdin reached the plugin whole");

    // A variable that is not plain ASCII, or a quote, stays out of the relay's JSON.
    for args in ["K8S_POD_NAME=caf\u{e9}", "K8S_POD_NAME=a\"b"] {
        let agent = FakeAgent::start(old_protocol_answer);
        let out = call("ADD", &pretty(&conf(&agent.socket))).args(args).run();
        // CNI_ARGS is the full plugin's to judge: it refuses a pair it cannot parse or
        // answers, but either way the relay sent nothing.
        assert!(!agent.ops().contains(&"run".to_string()), "{args}: {:?}", agent.ops());
        assert!(out.status <= 1, "{out:?}");
    }

    // A raw line break inside a string is invalid JSON, and stays so: the full plugin's
    // decode error, nothing sent.
    let agent = FakeAgent::start(old_protocol_answer);
    let broken = String::from_utf8(pretty(&conf(&agent.socket))).unwrap().replace("relaynet", "relay\nnet");
    let err = call("ADD", broken.as_bytes()).run().error();
    assert_eq!(err.code, 6, "{err:?}");
    assert!(agent.ops().is_empty());

    // Other verbs are the full plugin's: CHECK goes to etcd (unreachable here), not the agent.
    let agent = FakeAgent::start(old_protocol_answer);
    let err = call("CHECK", &pretty(&conf(&agent.socket))).run().error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(agent.ops().is_empty());
}

/// An agent answering the relay in any other shape (an older agent, a broken or hostile
/// one) costs one round trip: the full plugin then asks in its own protocol.
#[test]
fn an_answer_in_another_shape_gets_the_full_plugin() {
    let claims: [&[u8]; 6] = [
        b"{\"code\":6,\"msg\":\"etcd-ipam agent: unknown op \\\"run\\\"\"}\n",
        b"CNI-RS-RELAY 0 1000000000 0\n{}",
        b"CNI-RS-RELAY 0 10 0\n{}",
        b"CNI-RS-RELAY 0 2 0\n{}trailing",
        b"CNI-RS-RELAY 0 2",
        b"\0\0\0garbage",
    ];
    for claim in claims {
        let agent = FakeAgent::start(move |request| match request["op"].as_str() {
            Some("run") => claim.to_vec(),
            _ => old_protocol_answer(request),
        });
        let out = call("ADD", &pretty(&conf(&agent.socket))).run();
        served_by_the_full_plugin(&out, &agent, &["run", "add"]);
    }
}

/// An agent that takes the request and never answers: the relay gives up after four
/// `timeoutMs` (as the full plugin waits), and the full plugin, asking again, gets no
/// answer either: code 11, as before the relay.
#[test]
fn a_silent_agent_ends_in_the_full_plugins_code_11() {
    let (_dir, socket, listener) = listening();
    let held = Arc::new(Mutex::new(Vec::new()));
    let holding = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            holding.lock().unwrap().push(stream);
        }
    });
    let mut config = conf(&socket);
    config["ipam"]["timeoutMs"] = 25.into();
    let err = call("ADD", &pretty(&config)).run().error();
    assert_eq!(err.code, 11, "{err:?}");
    assert_eq!(held.lock().unwrap().len(), 2, "the relay's connection, then the full plugin's");
}
