//! etcd-ipam, the plugin binary against a real 3-member etcd cluster on 127.0.0.1: the
//! result, the state in etcd, blocks claimed and borrowed, exhaustion, GC and STATUS,
//! overlapping pools, etcd unreachable, and racing nodes never sharing an address.

mod etcd_ipam_hostile;
mod etcd_ipam_tls;

use std::collections::HashSet;
use std::time::Duration;

use cni_etcd_ipam::allocator::Allocator;
use cni_etcd_ipam::block::Block;
use cni_etcd_ipam::config::EtcdIpamConf;
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::{json, Value};

fn conf(cluster_endpoints: &[String], network: &str, node: &str, pools: &[&str], block_size: u8) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": network,
        "type": "etcd-ipam",
        "ipam": {
            "type": "etcd-ipam",
            "endpoints": cluster_endpoints,
            "pools": pools,
            "blockSize": block_size,
            "nodeName": node,
            "routes": [{"dst": "0.0.0.0/0"}]
        }
    })
}

fn run(conf: &Value, command: &str, container_id: &str) -> PluginOutput {
    PluginCall::new(env!("CARGO_BIN_EXE_etcd-ipam"), command)
        .container_id(container_id)
        .netns("/var/run/netns/ed-unused")
        .config(conf)
        .run()
}

fn address(result: &Value) -> String {
    result["ips"][0]["address"].as_str().unwrap().to_string()
}

fn etcd_keys(cluster: &EtcdCluster, prefix: &str) -> Vec<String> {
    let (kvs, _) = cluster.client().get_prefix(prefix.as_bytes(), true).unwrap();
    kvs.iter().map(|kv| kv.key_str()).collect()
}

fn block(cluster: &EtcdCluster, key: &str) -> Block {
    Block::from_json(&cluster.client().get(key.as_bytes()).unwrap().unwrap().value).unwrap()
}

#[test]
fn add_check_del_gc_status_and_the_state_in_etcd() {
    let cluster = EtcdCluster::start("edi", 3);
    let conf = conf(&cluster.endpoints(), "ednet", "node-a", &["10.77.0.0/16"], 26);
    let first = run(&conf, "ADD", "c1").json();
    let ip = address(&first);
    let block_net: ipnet::IpNet = ip.parse::<ipnet::IpNet>().unwrap().trunc();
    assert!(ip.starts_with("10.77.") && ip.ends_with("/26"), "{first}");
    assert_eq!(first["ips"][0]["gateway"], Block::new(block_net, "").gateway().to_string());
    assert_eq!(first["routes"], json!([{"dst": "0.0.0.0/0"}]));
    // Repeated ADD: the same address. Another attachment: another address, same block.
    assert_eq!(address(&run(&conf, "ADD", "c1").json()), ip);
    let second = address(&run(&conf, "ADD", "c2").json());
    assert_ne!(second, ip);
    assert_eq!(second.parse::<ipnet::IpNet>().unwrap().trunc(), block_net);

    let block_key = format!("/cni-rs/ipam/ednet/block/{}", Block::id(&block_net));
    let stored = block(&cluster, &block_key);
    assert_eq!(stored.affinity, "node-a");
    let holders: Vec<&String> = stored.allocations.values().collect();
    assert_eq!(holders, ["c1/eth0", "c2/eth0"]);
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/ednet/handle/"),
        ["/cni-rs/ipam/ednet/handle/c1/eth0", "/cni-rs/ipam/ednet/handle/c2/eth0"]
    );
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/ednet/affinity/"),
        [format!("/cni-rs/ipam/ednet/affinity/node-a/{}", Block::id(&block_net))]
    );

    let with_prev = |c: &Value, r: &Value| {
        let mut c = c.clone();
        c["prevResult"] = r.clone();
        c
    };
    assert!(run(&with_prev(&conf, &first), "CHECK", "c1").success());
    let err = run(&conf, "CHECK", "c9").error();
    assert!(err.msg.contains("no address is allocated to c9/eth0"), "{err:?}");

    // DEL releases in the block and the handle; a second DEL is a no-op.
    assert!(run(&conf, "DEL", "c1").success());
    assert!(run(&conf, "DEL", "c1").success());
    assert_eq!(block(&cluster, &block_key).allocations.len(), 1);
    assert_eq!(etcd_keys(&cluster, "/cni-rs/ipam/ednet/handle/"), ["/cni-rs/ipam/ednet/handle/c2/eth0"]);

    // GC keeps the valid attachment, releases the other one of this node, and leaves
    // another node's attachment alone.
    run(&conf, "ADD", "c3").json();
    let other_node = conf_with_node(&conf, "node-b");
    let on_b = address(&run(&other_node, "ADD", "b1").json());
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c2", "ifname": "eth0"}]);
    assert!(run(&gc, "GC", "").success(), "{:?}", run(&gc, "GC", ""));
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/ednet/handle/"),
        ["/cni-rs/ipam/ednet/handle/b1/eth0", "/cni-rs/ipam/ednet/handle/c2/eth0"]
    );
    // node-b claimed a block of its own.
    assert_ne!(on_b.parse::<ipnet::IpNet>().unwrap().trunc(), block_net);
    assert!(run(&conf, "STATUS", "").success());
}

fn conf_with_node(conf: &Value, node: &str) -> Value {
    let mut c = conf.clone();
    c["ipam"]["nodeName"] = node.into();
    c
}

#[test]
fn new_blocks_when_full_borrowing_when_all_claimed_then_exhausted() {
    let cluster = EtcdCluster::start("edb", 3);
    // A /27 pool in /29 blocks: 4 blocks of 5 usable addresses.
    let a = conf(&cluster.endpoints(), "edsmall", "node-a", &["10.78.0.0/27"], 29);
    let b = conf_with_node(&a, "node-b");
    let mut seen = HashSet::new();
    for i in 0..6 {
        assert!(seen.insert(address(&run(&a, "ADD", &format!("a{i}")).json())));
    }
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/edsmall/affinity/node-a/").len(),
        2,
        "a full block, then a new one"
    );
    for i in 0..10 {
        assert!(seen.insert(address(&run(&b, "ADD", &format!("b{i}")).json())));
    }
    assert_eq!(etcd_keys(&cluster, "/cni-rs/ipam/edsmall/affinity/node-b/").len(), 2);
    // Every block is claimed: node-c borrows node-a's 4 free addresses.
    let c = conf_with_node(&a, "node-c");
    for i in 0..4 {
        assert!(seen.insert(address(&run(&c, "ADD", &format!("c{i}")).json())));
    }
    assert!(etcd_keys(&cluster, "/cni-rs/ipam/edsmall/affinity/node-c/").is_empty());
    // Exhausted: a clear code-11 error, and nothing written for the failed attachment.
    let err = run(&c, "ADD", "c-late").error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("no free address in pools 10.78.0.0/27"), "{err:?}");
    assert!(cluster.client().get(b"/cni-rs/ipam/edsmall/handle/c-late/eth0").unwrap().is_none());
    let status = run(&c, "STATUS", "").error();
    assert_eq!(status.code, 50);
    assert!(status.msg.contains("exhausted"), "{status:?}");
    // One DEL makes room again.
    assert!(run(&a, "DEL", "a0").success());
    assert!(run(&c, "STATUS", "").success());
    assert!(!seen.insert(address(&run(&c, "ADD", "c-late").json())), "the released address is reused");
}

#[test]
fn pools_overlapping_another_networks_are_refused() {
    let cluster = EtcdCluster::start("edo", 3);
    let first = conf(&cluster.endpoints(), "edone", "node-a", &["10.79.0.0/16"], 26);
    run(&first, "ADD", "x").json();
    let second = conf(&cluster.endpoints(), "edtwo", "node-a", &["10.79.128.0/17"], 26);
    let err = run(&second, "ADD", "y").error();
    assert_eq!(err.code, 7, "{err:?}");
    assert!(err.msg.contains("10.79.128.0/17 overlaps pool 10.79.0.0/16 of network edone"), "{err:?}");
    assert!(etcd_keys(&cluster, "/cni-rs/ipam/edtwo/").is_empty());
    // A disjoint pool is fine.
    let third = conf(&cluster.endpoints(), "edthree", "node-a", &["10.80.0.0/16"], 26);
    run(&third, "ADD", "z").json();
}

#[test]
fn etcd_unreachable_is_code_11_and_allocates_nothing() {
    let port = cni_testkit::etcd::free_port();
    let conf = conf(&[format!("http://127.0.0.1:{port}")], "edun", "node-a", &["10.81.0.0/16"], 26);
    let err = run(&conf, "ADD", "c1").error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("etcd unreachable") && err.msg.contains("nothing was allocated"), "{err:?}");
    assert_eq!(run(&conf, "STATUS", "").error().code, 50);
    // Bad configuration is refused before etcd is asked.
    let mut bad = conf.clone();
    bad["ipam"]["pools"] = json!(["10.81.0.0/16", "10.81.3.0/24"]);
    let err = run(&bad, "ADD", "c1").error();
    assert_eq!(err.code, 7);
    assert!(err.msg.contains("ipam.pools: 10.81.3.0/24 overlaps 10.81.0.0/16"), "{err:?}");
}

#[test]
fn racing_nodes_never_share_an_address_even_with_a_member_killed() {
    let mut cluster = EtcdCluster::start("edr", 3);
    let endpoints = cluster.endpoints();
    let allocate_all = |round: &str| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let endpoints = endpoints.clone();
                    scope.spawn(move || {
                        // Two threads per node: they race on the node's blocks too.
                        let node = format!("node-{}", t / 2);
                        let conf = conf(&endpoints, "edrace", &node, &["10.82.0.0/20"], 27);
                        let conf = EtcdIpamConf::parse(conf.to_string().as_bytes()).unwrap();
                        let mut client = cni_etcd::Client::new(&endpoints, Duration::from_secs(2)).unwrap();
                        client.prefer(t);
                        let mut allocator = Allocator::new(conf, client);
                        (0..40)
                            .map(|i| {
                                allocator.allocate(&format!("{round}-{t}-{i}/eth0")).unwrap().address.addr()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
    };
    let mut all = allocate_all("r1");
    cluster.kill(1);
    all.extend(allocate_all("r2"));
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), 640, "duplicates among {} addresses", all.len());
    // etcd agrees: one handle per allocation and as many allocations in the blocks.
    let mut client = cluster.client();
    let (handles, _) = client.get_prefix(b"/cni-rs/ipam/edrace/handle/", true).unwrap();
    assert_eq!(handles.len(), 640);
    let (blocks, _) = client.get_prefix(b"/cni-rs/ipam/edrace/block/", false).unwrap();
    let in_blocks: usize =
        blocks.iter().map(|kv| Block::from_json(&kv.value).unwrap().allocations.len()).sum();
    assert_eq!(in_blocks, 640);
}

#[test]
fn add_and_del_through_the_node_agent() {
    use cni_etcd_ipam::agent::Agent;
    let cluster = EtcdCluster::start("eda", 3);
    let dir = tempfile::Builder::new().prefix("ed-agent").tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let mut via_agent = conf(&cluster.endpoints(), "edagent", "node-a", &["10.83.0.0/16"], 26);
    via_agent["ipam"]["agentSocket"] = socket.display().to_string().into();
    // No agent listening: a clear code-11 error, nothing allocated.
    let err = run(&via_agent, "ADD", "c0").error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("node agent at") && err.msg.contains("unreachable"), "{err:?}");

    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || std::sync::Arc::new(Agent::default()).serve(listener));
    let first = address(&run(&via_agent, "ADD", "c1").json());
    let second = address(&run(&via_agent, "ADD", "c2").json());
    assert_ne!(first, second);
    assert_eq!(address(&run(&via_agent, "ADD", "c1").json()), first, "a repeated ADD gets the same address");
    // The relay (the binary hands the whole ADD to the agent before libc starts) prints
    // what the full plugin prints when it cannot carry the configuration (here the
    // socket's path written with an escape) and the plugin asks the agent itself.
    let full = |conf: &Value, command: &str, id: &str| {
        let text = serde_json::to_string(conf).unwrap().replace("/agent.sock", "\\/agent.sock");
        PluginCall::new(env!("CARGO_BIN_EXE_etcd-ipam"), command)
            .container_id(id)
            .netns("/var/run/netns/ed-unused")
            .stdin(text)
            .run()
    };
    let (relayed, by_full_plugin) = (run(&via_agent, "ADD", "c1"), full(&via_agent, "ADD", "c1"));
    assert_eq!((relayed.status, &relayed.stdout), (by_full_plugin.status, &by_full_plugin.stdout));
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/edagent/handle/"),
        ["/cni-rs/ipam/edagent/handle/c1/eth0", "/cni-rs/ipam/edagent/handle/c2/eth0"]
    );
    // A plugin going straight to etcd and the agent share the state.
    let direct = conf(&cluster.endpoints(), "edagent", "node-a", &["10.83.0.0/16"], 26);
    let third = address(&run(&direct, "ADD", "c3").json());
    assert!(![&first, &second].contains(&&third));
    assert_ne!(address(&run(&via_agent, "ADD", "c4").json()), third, "the agent's cached block was stale");
    assert!(run(&via_agent, "DEL", "c1").success());
    assert!(run(&via_agent, "DEL", "c1").success());
    assert_eq!(etcd_keys(&cluster, "/cni-rs/ipam/edagent/handle/").len(), 3);
    // Errors from the agent keep their code.
    let mut bad = via_agent.clone();
    bad["ipam"]["pools"] = json!(["10.84.0.0/16"]);
    run(&bad, "ADD", "x").json();
    bad["name"] = "edagent2".into();
    let err = run(&bad, "ADD", "y").error();
    assert_eq!(err.code, 7, "{err:?}");
    assert!(err.msg.contains("overlaps pool 10.84.0.0/16 of network edagent"), "{err:?}");
    let (relayed, by_full_plugin) = (run(&bad, "ADD", "y"), full(&bad, "ADD", "y"));
    assert_eq!((relayed.status, &relayed.stdout), (by_full_plugin.status, &by_full_plugin.stdout));
}

#[test]
fn a_gone_nodes_blocks_are_reclaimed_by_gc_after_the_grace_period() {
    let cluster = EtcdCluster::start("edg", 3);
    let mut a = conf(&cluster.endpoints(), "edgone", "node-a", &["10.85.0.0/16"], 26);
    a["ipam"]["nodeGracePeriodSeconds"] = 2.into();
    let b = conf_with_node(&a, "node-b");
    let mut c = conf_with_node(&a, "node-c");
    c["ipam"].as_object_mut().unwrap().remove("nodeGracePeriodSeconds");
    run(&a, "ADD", "a1").json();
    for i in 0..3 {
        run(&b, "ADD", &format!("b{i}")).json();
    }
    run(&c, "ADD", "c1").json();
    // Heartbeats: node-a and node-b register; node-c (no grace period) never does.
    assert!(run(&a, "STATUS", "").success());
    assert!(run(&b, "STATUS", "").success());
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/edgone/registered/"),
        ["/cni-rs/ipam/edgone/registered/node-a", "/cni-rs/ipam/edgone/registered/node-b"]
    );
    // node-b stops; node-a keeps calling STATUS until etcd expires node-b's heartbeat.
    let mut expired = false;
    for _ in 0..100 {
        assert!(run(&a, "STATUS", "").success());
        if cluster.client().get(b"/cni-rs/ipam/edgone/seen/node-b").unwrap().is_none() {
            expired = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(expired, "node-b's heartbeat lease never expired");
    let mut gc = a.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "a1", "ifname": "eth0"}]);
    assert!(run(&gc, "GC", "").success(), "{:?}", run(&gc, "GC", ""));
    // node-b's handles, blocks and registration are gone; node-a's and node-c's stay.
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/edgone/handle/"),
        ["/cni-rs/ipam/edgone/handle/a1/eth0", "/cni-rs/ipam/edgone/handle/c1/eth0"]
    );
    assert!(etcd_keys(&cluster, "/cni-rs/ipam/edgone/affinity/node-b/").is_empty());
    assert_eq!(etcd_keys(&cluster, "/cni-rs/ipam/edgone/affinity/node-c/").len(), 1);
    assert_eq!(etcd_keys(&cluster, "/cni-rs/ipam/edgone/block/").len(), 2);
    assert_eq!(
        etcd_keys(&cluster, "/cni-rs/ipam/edgone/registered/"),
        ["/cni-rs/ipam/edgone/registered/node-a"]
    );
}
