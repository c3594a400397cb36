//! etcd-ipam's combined ADDs (the node agent's batching) against a real 3-member etcd: a
//! batch on a cached block is one transaction, a repeated ADD inside a batch gets the
//! attachment's one address, and many concurrent ADDs of several nodes never share an
//! address, in the results and in etcd's own state.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cni_etcd_ipam::allocator::Allocator;
use cni_etcd_ipam::batch::Batcher;
use cni_etcd_ipam::block::Block;
use cni_etcd_ipam::config::EtcdIpamConfig;
use cni_etcd_testing::EtcdCluster;
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
    let conf = EtcdIpamConfig::parse(conf.to_string().as_bytes()).unwrap();
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
