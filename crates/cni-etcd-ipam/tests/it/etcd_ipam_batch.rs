//! etcd-ipam's combined ADDs (the node agent's batching) against a real 3-member etcd: a
//! batch on a cached block is one transaction, a repeated ADD inside a batch gets the
//! attachment's one address, and many concurrent ADDs of several nodes never share an
//! address, in the results and in etcd's own state; an ADD whose outcome etcd never told
//! is released once etcd answers again.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cni_etcd_ipam::allocator::Allocator;
use cni_etcd_ipam::batch::Batcher;
use cni_etcd_ipam::block::Block;
use cni_etcd_ipam::config::EtcdIpamConf;
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::poll::{finishes, EVENTUALLY};
use ipnet::IpNet;
use serde_json::json;

fn allocator(cluster: &EtcdCluster, network: &str, node: &str) -> Allocator {
    allocator_with_blocks(cluster, network, node, 26)
}

fn allocator_with_blocks(cluster: &EtcdCluster, network: &str, node: &str, block_len: u8) -> Allocator {
    let conf = json!({
        "name": network,
        "ipam": {"type": "etcd-ipam", "endpoints": cluster.endpoints(), "pools": ["10.95.0.0/16"],
                 "blockSize": block_len, "nodeName": node}
    });
    let conf = EtcdIpamConf::parse(conf.to_string().as_bytes()).unwrap();
    Allocator::new(conf, cni_etcd::Client::new(&cluster.endpoints(), Duration::from_secs(2)).unwrap())
}

fn revision(cluster: &EtcdCluster) -> i64 {
    cluster.client().get_prefix(b"/cni-rs/ipam/", true).unwrap().1
}

#[test]
fn a_batch_on_the_cached_block_is_one_transaction() {
    let cluster = EtcdCluster::start("etb1", 3);
    let mut allocator = allocator(&cluster, "etb1", "node-a");
    let first = allocator.allocate("c0/eth0").unwrap();
    let before = revision(&cluster);
    let ids: Vec<String> = (1..=5).map(|i| format!("c{i}/eth0")).collect();
    let batch: Vec<IpAddr> =
        allocator.allocate_batch(&ids).into_iter().map(|r| r.unwrap().address.addr()).collect();
    assert_eq!(revision(&cluster), before + 1, "five ADDs on a cached block are one write");
    let all: HashSet<IpAddr> = batch.iter().copied().chain([first.address.addr()]).collect();
    assert_eq!(all.len(), 6, "{batch:?}");
    // The state in etcd: one handle per attachment, each in the block.
    let (handles, _) = cluster.client().get_prefix(b"/cni-rs/ipam/etb1/handle/", true).unwrap();
    assert_eq!(handles.len(), 6);
    let block_key = format!("/cni-rs/ipam/etb1/block/{}", Block::id(&first.address.trunc()));
    let block =
        Block::from_json(&cluster.client().get(block_key.as_bytes()).unwrap().unwrap().value).unwrap();
    let held: HashSet<IpAddr> = block.allocations.keys().map(|o| block.address(*o)).collect();
    assert_eq!(held, all);

    // A batch with an attachment that already has an address: the transaction loses, each
    // ADD is served on its own, the repeated one gets its address back.
    let again = vec!["c1/eth0".to_string(), "c6/eth0".to_string()];
    let results: Vec<IpAddr> =
        allocator.allocate_batch(&again).into_iter().map(|r| r.unwrap().address.addr()).collect();
    assert_eq!(results[0], batch[0]);
    assert!(!all.contains(&results[1]));
    // The same attachment twice in one batch: one address.
    let twice = vec!["c7/eth0".to_string(), "c7/eth0".to_string()];
    let results: Vec<IpAddr> =
        allocator.allocate_batch(&twice).into_iter().map(|r| r.unwrap().address.addr()).collect();
    assert_eq!(results[0], results[1]);
    assert_eq!(cluster.client().get_prefix(b"/cni-rs/ipam/etb1/handle/", true).unwrap().0.len(), 8);
}

/// A batch larger than etcd's --max-txn-ops (128 at the test cluster's default) is split
/// into transactions etcd accepts, not refused whole and served one ADD per write; a batch
/// spilling over a full block goes on in the next one.
#[test]
fn a_batch_beyond_etcds_operation_limit_is_split_into_few_transactions() {
    let cluster = EtcdCluster::start("etb3", 3);
    let mut allocator = allocator_with_blocks(&cluster, "etb3", "node-a", 24);
    let first = allocator.allocate("c0/eth0").unwrap();
    let before = revision(&cluster);
    let ids: Vec<String> = (1..=200).map(|i| format!("c{i}/eth0")).collect();
    let batch: Vec<IpAddr> =
        allocator.allocate_batch(&ids).into_iter().map(|r| r.unwrap().address.addr()).collect();
    assert_eq!(revision(&cluster), before + 2, "200 ADDs on a cached /24 are two writes (127 + 73)");
    let all: HashSet<IpAddr> = batch.iter().copied().chain([first.address.addr()]).collect();
    assert_eq!(all.len(), 201);
    assert_eq!(cluster.client().get_prefix(b"/cni-rs/ipam/etb3/handle/", true).unwrap().0.len(), 201);

    // 300 more: the /24 has room for the first 52 or so, the rest spill into a new block
    // claimed by one ADD alone, then batched again.
    let before = revision(&cluster);
    let more: Vec<String> = (201..=500).map(|i| format!("c{i}/eth0")).collect();
    let results: Vec<IpAddr> =
        allocator.allocate_batch(&more).into_iter().map(|r| r.unwrap().address.addr()).collect();
    let writes = revision(&cluster) - before;
    assert!(writes <= 6, "300 ADDs across a block boundary took {writes} writes");
    let all: HashSet<IpAddr> = all.into_iter().chain(results).collect();
    assert_eq!(all.len(), 501, "no address handed out twice");
    let (handles, _) = cluster.client().get_prefix(b"/cni-rs/ipam/etb3/handle/", true).unwrap();
    assert_eq!(handles.len(), 501);
}

#[test]
fn concurrent_adds_of_several_nodes_never_share_an_address() {
    const NODES: usize = 3;
    const THREADS: usize = 6;
    const PER_THREAD: usize = 25;
    let cluster = EtcdCluster::start("etb2", 3);
    let batchers: Vec<Arc<Batcher>> = (0..NODES)
        .map(|n| Arc::new(Batcher::new(allocator(&cluster, "etb2", &format!("node-{n}")))))
        .collect();
    let addresses: Vec<IpAddr> = std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for (n, batcher) in batchers.iter().enumerate() {
            for t in 0..THREADS {
                threads.push(scope.spawn(move || {
                    (0..PER_THREAD)
                        .map(|i| batcher.allocate(&format!("n{n}-t{t}-{i}/eth0")).unwrap().address.addr())
                        .collect::<Vec<_>>()
                }));
            }
        }
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let total = NODES * THREADS * PER_THREAD;
    assert_eq!(addresses.len(), total);
    let unique: HashSet<&IpAddr> = addresses.iter().collect();
    assert_eq!(unique.len(), total, "duplicate addresses handed out");
    let mut client = cluster.client();
    let (handles, _) = client.get_prefix(b"/cni-rs/ipam/etb2/handle/", true).unwrap();
    assert_eq!(handles.len(), total);
    let (blocks, _) = client.get_prefix(b"/cni-rs/ipam/etb2/block/", false).unwrap();
    let mut held = Vec::new();
    for kv in &blocks {
        let block = Block::from_json(&kv.value).unwrap();
        held.extend(block.allocations.keys().map(|o| block.address(*o)));
    }
    let held_unique: HashSet<&IpAddr> = held.iter().collect();
    assert_eq!((held.len(), held_unique.len()), (total, total));
    assert_eq!(held_unique, unique);
    // DEL through the batcher frees the address in etcd.
    let gone = batchers[0].release("n0-t0-0/eth0").unwrap();
    assert!(gone.is_some());
    assert_eq!(client.get_prefix(b"/cni-rs/ipam/etb2/handle/", true).unwrap().0.len(), total - 1);
}

/// A TCP proxy in front of one etcd member that, while `swallow` is set, forwards every
/// request but drops the connection as soon as etcd starts answering one (its HEADERS
/// frame, which etcd sends once the request took effect): the client sees its connection
/// reset and cannot know (a leader lost right after accepting a write). The HTTP/2 control
/// frames etcd sends unasked (SETTINGS, PING, WINDOW_UPDATE) pass: dropping the connection
/// at those would cut requests off before etcd had them. While `hold` is set it forwards
/// every request and keeps the connection open, but nothing ever reaches the client (a
/// member whose leader died with the write in flight, or one wedged after committing).
struct SwallowingProxy {
    endpoint: String,
    swallow: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
}

impl SwallowingProxy {
    fn start(upstream: &str) -> SwallowingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let swallow = Arc::new(AtomicBool::new(false));
        let hold = Arc::new(AtomicBool::new(false));
        let upstream = upstream.trim_start_matches("http://").to_string();
        let (flag, holding) = (swallow.clone(), hold.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(&upstream)) else { continue };
                let (mut from_client, mut to_server) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_client, &mut to_server);
                    let _ = to_server.shutdown(Shutdown::Write);
                });
                let (flag, holding) = (flag.clone(), holding.clone());
                std::thread::spawn(move || relay_answers(server, client, &flag, &holding));
            }
        });
        SwallowingProxy { endpoint, swallow, hold }
    }

    fn swallow(&self, on: bool) {
        self.swallow.store(on, Ordering::SeqCst);
    }

    fn hold(&self, on: bool) {
        self.hold.store(on, Ordering::SeqCst);
    }
}

/// HTTP/2's frame type of a header block: the start of an answer.
const HEADERS_FRAME: u8 = 1;

/// Relays etcd's HTTP/2 frames to the client, one whole frame at a time.
fn relay_answers(mut server: TcpStream, mut client: TcpStream, swallow: &AtomicBool, hold: &AtomicBool) {
    loop {
        let mut frame = vec![0u8; 9];
        if server.read_exact(&mut frame).is_err() {
            break;
        }
        let (length, kind) = (u32::from_be_bytes([0, frame[0], frame[1], frame[2]]) as usize, frame[3]);
        frame.resize(9 + length, 0);
        if server.read_exact(&mut frame[9..]).is_err() {
            break;
        }
        if hold.load(Ordering::SeqCst) {
            continue;
        }
        if (swallow.load(Ordering::SeqCst) && kind == HEADERS_FRAME) || client.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

fn handle_exists(cluster: &EtcdCluster, network: &str, id: &str) -> bool {
    let key = format!("/cni-rs/ipam/{network}/handle/{id}");
    cluster.client().get(key.as_bytes()).unwrap().is_some()
}

/// An ADD whose transaction etcd committed but whose answer never came back is reported
/// failed (code 11, "nothing was allocated"); the batcher releases what it left before
/// its next batch, unless the runtime repeats that ADD, which then gets the address.
#[test]
fn an_add_of_unknown_outcome_is_released_once_etcd_answers_again() {
    let cluster = EtcdCluster::start("etb4", 3);
    let proxy = SwallowingProxy::start(&cluster.endpoints()[0]);
    let conf = json!({
        "name": "etb4",
        "ipam": {"type": "etcd-ipam", "endpoints": [proxy.endpoint], "pools": ["10.96.0.0/16"],
                 "nodeName": "node-a"}
    });
    let conf = EtcdIpamConf::parse(conf.to_string().as_bytes()).unwrap();
    let client = cni_etcd::Client::new(&[&proxy.endpoint], Duration::from_secs(2)).unwrap();
    let batcher = Batcher::new(Allocator::new(conf, client));
    let first = batcher.allocate("c0/eth0").unwrap().address.addr();

    proxy.swallow(true);
    let lost = batcher.allocate("c1/eth0").unwrap_err();
    assert_eq!(lost.cni_code(), 11, "{lost}");
    // The transaction did commit: the state the runtime was told does not exist.
    assert!(handle_exists(&cluster, "etb4", "c1/eth0"));
    proxy.swallow(false);
    let c2 = batcher.allocate("c2/eth0").unwrap().address.addr();
    assert!(!handle_exists(&cluster, "etb4", "c1/eth0"), "the lost ADD's handle is still in etcd");

    // (The release moved the block on: one more ADD caches it again, so that the next
    // lost ADD's transaction is one etcd commits.)
    let c2b = batcher.allocate("c2b/eth0").unwrap().address.addr();

    // Lost again, and this time the runtime retries that very ADD: it gets the address
    // the lost transaction took, which stays allocated.
    proxy.swallow(true);
    assert_eq!(batcher.allocate("c3/eth0").unwrap_err().cni_code(), 11);
    assert!(handle_exists(&cluster, "etb4", "c3/eth0"));
    proxy.swallow(false);
    let c3 = batcher.allocate("c3/eth0").unwrap().address.addr();
    let c4 = batcher.allocate("c4/eth0").unwrap().address.addr();
    assert!(handle_exists(&cluster, "etb4", "c3/eth0"), "a repeated ADD's address was released");
    let (handles, _) = cluster.client().get_prefix(b"/cni-rs/ipam/etb4/handle/", true).unwrap();
    assert_eq!(handles.len(), 5, "c0, c2, c2b, c3 and c4");
    let block_key = format!("/cni-rs/ipam/etb4/block/{}", Block::id(&IpNet::new(first, 26).unwrap().trunc()));
    let block =
        Block::from_json(&cluster.client().get(block_key.as_bytes()).unwrap().unwrap().value).unwrap();
    let held: HashSet<IpAddr> = block.allocations.keys().map(|o| block.address(*o)).collect();
    assert_eq!(held, HashSet::from([first, c2, c2b, c3, c4]), "the block holds exactly the reported ADDs");
}

/// The etcd state of one network: each handle's address, and every address its blocks hold.
fn etcd_addresses(cluster: &EtcdCluster, network: &str) -> (Vec<IpAddr>, Vec<IpAddr>) {
    let mut client = cluster.client();
    let handles = client.get_prefix(format!("/cni-rs/ipam/{network}/handle/").as_bytes(), false).unwrap().0;
    let handles = handles
        .iter()
        .map(|kv| {
            serde_json::from_slice::<serde_json::Value>(&kv.value).unwrap()["ip"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let blocks = client.get_prefix(format!("/cni-rs/ipam/{network}/block/").as_bytes(), false).unwrap().0;
    let held = blocks
        .iter()
        .flat_map(|kv| {
            let block = Block::from_json(&kv.value).unwrap();
            block.allocations.keys().map(|o| block.address(*o)).collect::<Vec<_>>()
        })
        .collect();
    (handles, held)
}

/// A member that takes a write and never answers (its leader died with the write in
/// flight) does not hold the ADD for the client's timeout: the call is tried on the next
/// member after a short wait, and that repeat of a write which did commit loses its
/// compare and returns what the first attempt allocated, for a single ADD and for a batch.
/// No address is handed out twice or leaked.
#[test]
fn a_write_a_member_committed_without_answering_is_repeated_on_the_next_once() {
    let cluster = EtcdCluster::start("etb5", 3);
    let proxy = SwallowingProxy::start(&cluster.endpoints()[0]);
    let endpoints = [proxy.endpoint.clone(), cluster.endpoints()[1].clone()];
    let conf = json!({
        "name": "etb5",
        "ipam": {"type": "etcd-ipam", "endpoints": endpoints, "pools": ["10.97.0.0/16"],
                 "nodeName": "node-a"}
    });
    let conf = EtcdIpamConf::parse(conf.to_string().as_bytes()).unwrap();
    // A timeout of an hour: an ADD that waited it out on the silent proxy could not finish
    // within the test's limit for "never".
    let hour = Duration::from_secs(3600);
    let mut allocator = Allocator::new(conf, cni_etcd::Client::new(&endpoints, hour).unwrap());
    let mut reported = vec![allocator.allocate("c0/eth0").unwrap().address.addr()];

    proxy.hold(true);
    let more = finishes("the ADDs pass over the member that never answers", EVENTUALLY, move || {
        let mut reported = vec![allocator.allocate("c1/eth0").unwrap().address.addr()];
        let ids: Vec<String> = (2..7).map(|i| format!("c{i}/eth0")).collect();
        allocator.client.prefer(0);
        for result in allocator.allocate_batch(&ids) {
            reported.push(result.unwrap().address.addr());
        }
        reported
    });
    reported.extend(more);
    assert!(handle_exists(&cluster, "etb5", "c1/eth0") && handle_exists(&cluster, "etb5", "c6/eth0"));

    let distinct: HashSet<IpAddr> = reported.iter().copied().collect();
    assert_eq!(distinct.len(), 7, "an address was handed out twice: {reported:?}");
    let (mut handles, mut held) = etcd_addresses(&cluster, "etb5");
    handles.sort();
    held.sort();
    reported.sort();
    assert_eq!(handles, reported, "etcd's handles are not exactly the reported ADDs");
    assert_eq!(held, reported, "etcd's blocks do not hold exactly the reported ADDs");
}
