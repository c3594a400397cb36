//! The overlay on a 3-member etcd losing a member: the agents are given all three
//! endpoints, and the member they all talk to first is killed while they run. Their lease
//! keep-alives and watches fail over to the survivors: every record outlives several TTLs
//! on its own lease, no peer's entries leave any host, and a node joining afterwards is
//! seen by every other node (and its pod reaches theirs).

use std::time::Duration;

use crate::harness::{pods_talk, Cluster, Host, PREFIX, TTL};
use cni_testkit::etcd::EtcdCluster;

/// The hosts started before the member dies; the last host joins after.
const FIRST: [usize; 3] = [0, 1, 2];
const JOINING: usize = 3;

fn record_lease(cluster: &Cluster, host: &Host) -> Option<i64> {
    let subnet = host.subnet()?;
    let key = format!("{PREFIX}/subnets/{}-{}", subnet.network(), subnet.prefix_len());
    Some(cluster.etcd.client().get(key.as_bytes()).unwrap()?.lease)
}

fn others(i: usize, hosts: &[usize]) -> Vec<usize> {
    hosts.iter().copied().filter(|&p| p != i).collect()
}

#[test]
fn agents_keep_their_records_and_see_a_joining_node_after_an_etcd_member_dies() {
    let mut cluster = Cluster::start("w6e", EtcdCluster::start("w6e", 3), 4);
    let endpoints = cluster.etcd.endpoints();
    for &i in &FIRST {
        cluster.hosts[i].start_agent(&endpoints, &[]);
    }
    for &i in &FIRST {
        let peers = others(i, &FIRST);
        assert!(cluster.wait_peers(i, &peers, Duration::from_secs(10)), "host {i}\n{}", cluster.logs());
    }
    let leases: Vec<i64> =
        FIRST.iter().map(|&i| record_lease(&cluster, &cluster.hosts[i]).expect("a record")).collect();

    // Member 0 is the first endpoint of every agent's list: its death forces each one's
    // keep-alives and watch over to another member.
    cluster.etcd.kill(0);
    std::thread::sleep(Duration::from_secs(3 * TTL));
    for (&i, lease) in FIRST.iter().zip(&leases) {
        let host = &cluster.hosts[i];
        assert_eq!(
            record_lease(&cluster, host),
            Some(*lease),
            "{}'s record after member 0 died (a lost lease shows as none or a new one)\n{}",
            host.name,
            cluster.logs()
        );
        assert!(
            !host.agent_log().contains("expired"),
            "{}'s lease ran out:\n{}",
            host.name,
            host.agent_log()
        );
    }
    for &i in &FIRST {
        assert!(
            cluster.wait_peers(i, &others(i, &FIRST), Duration::from_secs(1)),
            "host {i} lost a peer\n{}",
            cluster.logs()
        );
    }

    // A node joining now (its endpoint list still naming the dead member first) is seen by
    // every running node, and sees them.
    cluster.hosts[JOINING].start_agent(&endpoints, &[]);
    let all = [0, 1, 2, JOINING];
    for i in all {
        assert!(
            cluster.wait_peers(i, &others(i, &all), Duration::from_secs(10)),
            "host {i} after the join\n{}",
            cluster.logs()
        );
    }
    let plugins = cluster.plugins.clone();
    for i in [0, JOINING] {
        cluster.hosts[i].add_pod(&plugins);
    }
    let (old, new) = (&cluster.hosts[0], &cluster.hosts[JOINING]);
    pods_talk(new, old).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    pods_talk(old, new).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
}
