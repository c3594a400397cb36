//! The agent's `/metrics` and `/healthz` as a Prometheus server sees them: the agent binary
//! started with `--metrics-address` on loopback, addresses allocated and released through
//! its socket against a real etcd, the scrape parsed and its counters checked; hostile
//! clients of the metrics port; etcd stopped, and `/healthz` turning 503.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cni_testkit::etcd::EtcdCluster;
use cni_testkit::poll::EVENTUALLY;
use cni_testkit::scrape::{self, Samples};
use serde_json::{json, Value};

struct Agent {
    child: Child,
    socket: PathBuf,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start() -> Agent {
        let dir = tempfile::Builder::new().prefix("mx-agent").tempdir().unwrap();
        let socket = dir.path().join("run/agent.sock");
        let log = dir.path().join("agent.log");
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-ipam"))
            .args(["agent", "--metrics-address", "127.0.0.1:0", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        cni_testkit::socket_attack::wait_for_socket(&socket);
        Agent { child, socket, metrics: scrape::address_in_log(&log), _dir: dir }
    }

    fn ask(&self, request: &Value) -> Value {
        ask(&self.socket, request)
    }
}

fn ask(socket: &Path, request: &Value) -> Value {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap()
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(op: &str, endpoints: &[String], handle: &str) -> Value {
    json!({"op": op, "handle": handle, "config": {
        "cniVersion": "1.1.0", "name": "mxnet", "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": endpoints, "nodeName": "mx-node",
                 "pools": ["10.97.0.0/16"], "timeoutMs": 500}}})
}

fn counter(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples.value(&format!("etcd_ipam_agent_{name}"), labels)
}

#[test]
fn allocations_failures_and_etcd_health_are_scraped() {
    let mut cluster = EtcdCluster::start("mx", 1);
    let endpoints = cluster.endpoints();
    let agent = Agent::start();
    // Before any work: healthy (etcd not needed yet), nothing allocated. The one empty
    // connection that found the socket up is an undecodable request; the agent counts it
    // on its own thread, so it may land after the first scrape: wait until it has.
    assert_eq!(scrape::get(agent.metrics, "/healthz").unwrap().0, 200);
    let undecodable = [("op", "other"), ("reason", "decode")];
    let before = cni_testkit::poll::eventually("the socket probe counted as undecodable", EVENTUALLY, || {
        let samples = Samples::scrape(agent.metrics);
        let probes = samples.get("etcd_ipam_agent_failures_total", &undecodable).unwrap_or(0.0);
        (probes == 1.0).then_some(samples)
    });
    assert_eq!(counter(&before, "allocations_total", &[]), 0.0);
    let probes = 1.0;

    for n in 0..3 {
        let answer = agent.ask(&request("add", &endpoints, &format!("mx{n}/eth0")));
        assert!(answer["address"].is_string(), "{answer}");
    }
    assert!(agent.ask(&request("del", &endpoints, "mx0/eth0"))["released"].is_string());
    // An unknown verb and a configuration without pools: failures with their reasons.
    assert!(agent.ask(&request("frobnicate", &endpoints, "mx9/eth0"))["code"].is_number());
    let mut no_pools = request("add", &endpoints, "mx8/eth0");
    no_pools["config"]["ipam"].as_object_mut().unwrap().remove("pools");
    assert_eq!(agent.ask(&no_pools)["code"], 7);

    let samples = Samples::scrape(agent.metrics);
    assert_eq!(counter(&samples, "allocations_total", &[]), 3.0, "{samples}");
    assert_eq!(counter(&samples, "releases_total", &[]), 1.0);
    assert_eq!(counter(&samples, "failures_total", &undecodable), probes + 1.0, "{samples}");
    assert_eq!(counter(&samples, "failures_total", &[("op", "add"), ("reason", "invalid_config")]), 1.0);
    assert_eq!(counter(&samples, "cached_networks", &[]), 1.0);
    // Three ADDs one after another: three batches of one.
    assert_eq!(counter(&samples, "batch_size_count", &[]), 3.0);
    assert_eq!(counter(&samples, "batch_size_bucket", &[("le", "1.0")]), 3.0);
    let round_trips = counter(&samples, "etcd_request_duration_seconds_count", &[]);
    assert!(round_trips >= 4.0, "at least one etcd round trip per ADD and DEL: {samples}");
    assert_eq!(counter(&samples, "etcd_requests_failed_total", &[]), 0.0);
    let (status, body) = scrape::get(agent.metrics, "/healthz").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("etcd answered"), "{body}");

    // etcd stops: the next ADD fails with code 11, and the agent says it is unhealthy.
    cluster.kill(0);
    let answer = agent.ask(&request("add", &endpoints, "mx5/eth0"));
    assert_eq!(answer["code"], 11, "{answer}");
    let samples = Samples::scrape(agent.metrics);
    assert_eq!(counter(&samples, "failures_total", &[("op", "add"), ("reason", "etcd_unavailable")]), 1.0);
    assert!(counter(&samples, "etcd_requests_failed_total", &[]) >= 1.0, "{samples}");
    assert_eq!(counter(&samples, "allocations_total", &[]), 3.0);
    let (status, body) = scrape::get(agent.metrics, "/healthz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("etcd unreachable (last answered"), "{body}");
}

#[test]
fn hostile_metrics_clients_do_not_stop_allocations() {
    let cluster = EtcdCluster::start("mxh", 1);
    let endpoints = cluster.endpoints();
    let agent = Agent::start();
    // Every metrics thread and queue slot held by clients that never finish a request,
    // plus an oversized head.
    let idle: Vec<TcpStream> = (0..64).filter_map(|_| TcpStream::connect(agent.metrics).ok()).collect();
    let mut big = TcpStream::connect(agent.metrics).unwrap();
    let _ = big.write_all(&vec![b'a'; 32 << 10]);
    // The agent's real work goes on meanwhile.
    for n in 0..5 {
        let answer = agent.ask(&request("add", &endpoints, &format!("mxh{n}/eth0")));
        assert!(answer["address"].is_string(), "{answer}");
    }
    drop(idle);
    let mut refusal = String::new();
    big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = big.read_to_string(&mut refusal);
    // The oversized client got 431 or, queued behind the idle ones past the queue's room,
    // was closed unanswered; never a 200.
    assert!(refusal.is_empty() || refusal.starts_with("HTTP/1.1 431"), "{refusal}");
    // Once the idle clients are gone, scrapes are served again (the first tries may still
    // find the queue full and be closed, as a flood's are) and show the work done.
    let served = Samples::scrape_once_served(agent.metrics, EVENTUALLY);
    assert_eq!(counter(&served, "allocations_total", &[]), 5.0);
}
