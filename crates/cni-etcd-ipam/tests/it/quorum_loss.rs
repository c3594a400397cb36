//! Quorum loss on a real 3-member etcd cluster: with 2 of 3 members down, an ADD through
//! the plugin binary (through the node agent, and straight to etcd) fails within its
//! deadline with code 11 and allocates nothing; once the members are back, ADDs succeed
//! and etcd's handles, its blocks and the agent's answers agree (no leaked or duplicate
//! address).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cni_etcd_ipam::block::Block;
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::{json, Value};

const NETWORK: &str = "tpquorum";
/// Per etcd call; the plugin gives the agent four times this for the whole ADD.
const TIMEOUT_MS: u64 = 1000;

struct Agent {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start() -> Agent {
        let dir = tempfile::Builder::new().prefix("tp-agent").tempdir().unwrap();
        let socket = dir.path().join("run/agent.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-ipam"))
            .args(["agent", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        cni_testkit::socket_attack::wait_for_socket(&socket);
        Agent { child, socket, _dir: dir }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn conf(endpoints: &[String], agent: Option<&Path>) -> Value {
    let mut conf = json!({
        "cniVersion": "1.1.0", "name": NETWORK, "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": endpoints, "pools": ["10.231.0.0/16"],
                 "nodeName": "tp-node", "timeoutMs": TIMEOUT_MS}
    });
    if let Some(socket) = agent {
        conf["ipam"]["agentSocket"] = json!(socket);
    }
    conf
}

fn add(conf: &Value, container_id: &str) -> PluginOutput {
    PluginCall::new(env!("CARGO_BIN_EXE_etcd-ipam"), "ADD")
        .container_id(container_id)
        .netns("/var/run/netns/tp-unused")
        .config(conf)
        .run()
}

fn address(out: &PluginOutput) -> IpAddr {
    let cidr = out.json()["ips"][0]["address"].as_str().unwrap().to_string();
    cidr.parse::<ipnet::IpNet>().unwrap().addr()
}

/// Waits until member `index`'s own view has no leader: with its peers gone it has
/// stepped down (a proposal is then refused, not kept uncommitted in a leader's log).
fn wait_leaderless(cluster: &EtcdCluster, index: usize) {
    let endpoint = [cluster.endpoints()[index].clone()];
    let mut client = cni_etcd::Client::new(&endpoint, Duration::from_secs(1)).unwrap();
    cni_testkit::poll::until(&format!("member {index} to step down"), Duration::from_secs(30), || {
        client.member_status().is_ok_and(|status| status.leader == 0)
    });
}

/// etcd's state of the network: handle id -> address, and block entries holder -> address.
fn etcd_state(cluster: &EtcdCluster) -> (HashMap<String, IpAddr>, HashMap<String, IpAddr>) {
    let mut client = cluster.client();
    let prefix = format!("/cni-rs/ipam/{NETWORK}/");
    let (handles, _) = client.get_prefix(format!("{prefix}handle/").as_bytes(), false).unwrap();
    let handles = handles
        .iter()
        .map(|kv| {
            let id = kv.key_str().trim_start_matches(&format!("{prefix}handle/")).to_string();
            let value: Value = serde_json::from_slice(&kv.value).unwrap();
            (id, value["ip"].as_str().unwrap().parse().unwrap())
        })
        .collect();
    let (blocks, _) = client.get_prefix(format!("{prefix}block/").as_bytes(), false).unwrap();
    let mut entries = HashMap::new();
    for kv in &blocks {
        let block = Block::from_json(&kv.value).unwrap();
        for (offset, holder) in &block.allocations {
            assert!(entries.insert(holder.clone(), block.address(*offset)).is_none(), "{holder} twice");
        }
    }
    (handles, entries)
}

#[test]
fn two_of_three_members_down_fails_add_with_code_11_and_allocates_nothing() {
    let mut cluster = EtcdCluster::start("tpq", 3);
    let agent = Agent::start();
    let via_agent = conf(&cluster.endpoints(), Some(&agent.socket));
    let direct = conf(&cluster.endpoints(), None);
    let mut held: HashMap<String, IpAddr> = HashMap::new();
    // The agent has its connection and its block cached: the next ADD would be one
    // transaction.
    held.insert("tp-before/eth0".into(), address(&add(&via_agent, "tp-before")));

    cluster.kill(1);
    cluster.kill(2);
    wait_leaderless(&cluster, 0);
    // Each path gives up on its own deadline (four etcd calls' worth through the agent,
    // each member once per call straight to etcd): a plugin that waited for quorum would
    // hang here and fail the test at nextest's per-test limit.
    for (how, conf) in [("agent", &via_agent), ("direct", &direct)] {
        let lost = add(conf, &format!("tp-lost-{how}"));
        let err = lost.error();
        assert_eq!(err.code, 11, "{how}: {err:?}");
        assert!(err.msg.contains("nothing was allocated"), "{how}: {err:?}");
    }

    cluster.restart(1);
    cluster.restart(2);
    cluster.wait_ready(Duration::from_secs(30));
    // After the recovery ADDs succeed, on both paths; none gets an address already held.
    for i in 0..6 {
        let (how, conf) = if i % 2 == 0 { ("agent", &via_agent) } else { ("direct", &direct) };
        let id = format!("tp-after-{how}-{i}");
        let ip = address(&add(conf, &id));
        assert!(!held.values().any(|h| *h == ip), "{ip} handed out twice");
        held.insert(format!("{id}/eth0"), ip);
    }
    // The failed ADDs left nothing, and etcd's handles, its block entries and what the
    // plugins were told are one and the same.
    let (handles, entries) = etcd_state(&cluster);
    assert_eq!(handles, held, "etcd's handles");
    assert_eq!(entries, held, "etcd's block entries");
    let distinct: HashSet<&IpAddr> = held.values().collect();
    assert_eq!(distinct.len(), held.len());
}
