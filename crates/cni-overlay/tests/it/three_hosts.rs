//! The overlay on the real kernel and a real etcd cluster: three "hosts", a pod on each,
//! TCP between pods of different hosts, full-size packets with DF set, an agent killed
//! with SIGKILL and restarted, a host removed (its lease runs out) and an agent stopped
//! with SIGTERM + --revoke-on-exit. Needs root and Debian's etcd-server.

use std::net::SocketAddr;
use std::time::Duration;

use crate::harness::{ip_counter, pods_talk, wait_for, Cluster, Host, DEVICE, PREFIX, TTL};
use cni_testkit::traffic::{udp_echo, udp_echo_server};
use ipnet::Ipv4Net;

/// One UDP datagram of `size` bytes from `from`'s pod to an echo server in `to`'s pod.
fn udp_across(from: &Host, to: &Host, size: usize) -> Result<(), String> {
    let server =
        udp_echo_server(to.pod.as_ref().unwrap().netns(), SocketAddr::new(to.pod_ip.unwrap().into(), 0))
            .map_err(|e| e.to_string())?;
    let payload = vec![0xa5; size];
    udp_echo(from.pod.as_ref().unwrap().netns(), server.local_addr(), &payload, Duration::from_secs(3))
        .map_err(|e| format!("UDP {size} bytes {} -> {}: {e}", from.name, to.name))
}

fn record(cluster: &Cluster, host: &Host) -> Option<cni_etcd::KeyValue> {
    let subnet = host.subnet()?;
    let key = format!("{}/subnets/{}-{}", PREFIX, subnet.network(), subnet.prefix_len());
    cluster.etcd.client().get(key.as_bytes()).unwrap()
}

#[test]
fn overlay_across_three_hosts() {
    let mut cluster = Cluster::new();
    let endpoints = cluster.etcd.endpoints();
    let subnets = agents_take_distinct_leased_subnets(&mut cluster, &endpoints);
    pods_talk_in_a_ring(&mut cluster);
    full_size_packets_cross_unfragmented(&cluster);
    a_killed_and_restarted_keeps_its_subnet_lease_and_device(&mut cluster, &endpoints, subnets[0]);
    c_removed_leaves_only_the_remaining_peer(&mut cluster, subnets[2]);
    a_back_after_its_lease_expired_resyncs_and_b_survives_a_member_loss(&mut cluster, &endpoints, &subnets);
    b_revoking_on_sigterm_is_dropped_at_once(&mut cluster, &endpoints, subnets[1]);
}

/// Every agent writes its conflist, takes a subnet of its own on a lease (its record names
/// its underlay) and gets exactly its peers' entries.
fn agents_take_distinct_leased_subnets(cluster: &mut Cluster, endpoints: &[String]) -> Vec<Ipv4Net> {
    for host in &mut cluster.hosts {
        host.start_agent(endpoints, &[]);
    }
    for host in &cluster.hosts {
        let written = wait_for(Duration::from_secs(10), || host.conflist_path().exists().then_some(()));
        assert!(written.is_some(), "{} wrote no conflist\n{}", host.name, cluster.logs());
    }
    let subnets: Vec<_> = cluster.hosts.iter().map(|h| h.subnet().unwrap()).collect();
    assert!(subnets[0] != subnets[1] && subnets[1] != subnets[2] && subnets[0] != subnets[2], "{subnets:?}");
    cluster.assert_full_mesh(Duration::from_secs(10));
    // Each node's record is on a lease (it goes away when the node does).
    for host in &cluster.hosts {
        let kv = record(cluster, host).expect("the node's record");
        assert_ne!(kv.lease, 0, "{} record has no lease", host.name);
        let value: serde_json::Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(value["underlay"], host.underlay.to_string());
    }
    subnets
}

/// A pod on every host; TCP A -> B -> C -> A.
fn pods_talk_in_a_ring(cluster: &mut Cluster) {
    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts {
        host.add_pod(&plugins);
    }
    let [a, b, c] = [&cluster.hosts[0], &cluster.hosts[1], &cluster.hosts[2]];
    for (from, to) in [(a, b), (b, c), (c, a)] {
        pods_talk(from, to).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    }
}

/// MTU: underlay 1500, VXLAN device and pod interface 1450. Full-size packets (a UDP
/// datagram filling the pod MTU, then a TCP transfer) cross without any fragment made or
/// reassembled anywhere on the way (the kernel's own IP counters); a datagram one byte
/// larger is fragmented at the pod, which shows the counters do see fragments.
fn full_size_packets_cross_unfragmented(cluster: &Cluster) {
    let [a, b] = [&cluster.hosts[0], &cluster.hosts[1]];
    let underlay_mtu = a.netlink().require_link("ovu0").unwrap().mtu;
    assert_eq!(a.netlink().require_link(DEVICE).unwrap().mtu, underlay_mtu - 50);
    let pod_mtu = a.pod.as_ref().unwrap().netlink().unwrap().require_link("eth0").unwrap().mtu;
    assert_eq!(pod_mtu, underlay_mtu - 50);
    let fragments = || {
        let pods = [a, b].map(|h| h.pod.as_ref().unwrap());
        [a.ns(), b.ns(), pods[0], pods[1]]
            .map(|ns| ip_counter(ns, "FragCreates") + ip_counter(ns, "ReasmReqds"))
    };
    let before = fragments();
    udp_across(a, b, (pod_mtu - 28) as usize).unwrap();
    pods_talk(a, b).unwrap();
    assert_eq!(fragments(), before, "full-size packets were fragmented (hosts A, B, pods A, B)");
    udp_across(a, b, (pod_mtu - 27) as usize).unwrap();
    let after = fragments();
    assert!(after[2] > before[2], "the oversized datagram was not fragmented at pod A: {before:?} {after:?}");
}

/// kill -9 of A's agent: the kernel state stays, the pods keep talking, and the restarted
/// agent keeps the same subnet (same record, kept alive past the TTL) and adopts its device.
fn a_killed_and_restarted_keeps_its_subnet_lease_and_device(
    cluster: &mut Cluster,
    endpoints: &[String],
    subnet_a: Ipv4Net,
) {
    let lease_before = record(cluster, &cluster.hosts[0]).unwrap().lease;
    let device_before = cluster.hosts[0].netlink().require_link(DEVICE).unwrap().index;
    cluster.hosts[0].kill_agent();
    let [a, b, _] = [&cluster.hosts[0], &cluster.hosts[1], &cluster.hosts[2]];
    pods_talk(a, b).unwrap();
    pods_talk(b, a).unwrap();
    cluster.hosts[0].start_agent(endpoints, &[]);
    std::thread::sleep(Duration::from_secs(TTL + 1));
    let [a, _, c] = [&cluster.hosts[0], &cluster.hosts[1], &cluster.hosts[2]];
    assert_eq!(a.subnet(), Some(subnet_a), "the restarted agent changed the subnet\n{}", cluster.logs());
    let kv = record(cluster, a).expect("A's record is kept alive after the restart");
    assert_eq!(kv.lease, lease_before, "restarted within the TTL: the same lease is re-adopted");
    let device_after = cluster.hosts[0].netlink().require_link(DEVICE).unwrap().index;
    assert_eq!(
        device_after, device_before,
        "the restarted agent made its device again instead of adopting it"
    );
    assert!(cluster.wait_peers(0, &[1, 2], Duration::from_secs(5)), "{}", cluster.logs());
    pods_talk(a, c).unwrap();
    pods_talk(c, a).unwrap();
}

/// Host C removed: its agent dies and its lease runs out; A and B drop its entries within
/// the TTL (plus a margin for etcd's lease checker and the watch).
fn c_removed_leaves_only_the_remaining_peer(cluster: &mut Cluster, subnet_c: Ipv4Net) {
    let underlay_c = cluster.hosts[2].underlay;
    cluster.hosts[2].kill_agent();
    for i in [0, 1] {
        let gone = wait_for(Duration::from_secs(TTL + 4), || {
            let e = cluster.hosts[i].entries();
            (!e.has_subnet(subnet_c) && !e.has_underlay(underlay_c)).then_some(())
        });
        assert!(
            gone.is_some(),
            "host {i} kept C's entries: {:?}\n{}",
            cluster.hosts[i].entries(),
            cluster.logs()
        );
        assert_eq!(cluster.hosts[i].entries().count(), (1, 1, 1), "only the remaining peer is left");
    }
    pods_talk(&cluster.hosts[0], &cluster.hosts[1]).unwrap();
}

/// C comes back; then A's agent is down for longer than the TTL while C leaves again, and
/// the etcd member every agent watches through is killed. A's kernel keeps C's stale
/// entries meanwhile; on its return A asks for its old subnet again (from its subnet file:
/// its lease is gone), its resync drops C's entries, and B's broken watch resyncs from
/// another member.
fn a_back_after_its_lease_expired_resyncs_and_b_survives_a_member_loss(
    cluster: &mut Cluster,
    endpoints: &[String],
    subnets: &[Ipv4Net],
) {
    let (subnet_a, subnet_c) = (subnets[0], subnets[2]);
    cluster.hosts[2].start_agent(endpoints, &[]);
    assert!(cluster.wait_peers(0, &[1, 2], Duration::from_secs(5)), "{}", cluster.logs());
    cluster.hosts[0].kill_agent();
    cluster.hosts[2].kill_agent();
    cluster.etcd.kill(0);
    assert!(
        cluster.wait_peers(1, &[], Duration::from_secs(TTL + 4)),
        "B kept A's or C's entries\n{}",
        cluster.logs()
    );
    assert!(record(cluster, &cluster.hosts[0]).is_none(), "A's record outlived its lease");
    assert!(cluster.hosts[0].entries().has_subnet(subnet_c), "A's kernel state went with its agent");
    cluster.hosts[0].start_agent(endpoints, &[]);
    assert_eq!(cluster.hosts[0].subnet(), Some(subnet_a), "A came back with another subnet");
    assert!(record(cluster, &cluster.hosts[0]).is_some(), "A's record is back");
    assert!(
        cluster.wait_peers(0, &[1], Duration::from_secs(5)),
        "A kept C's stale entries\n{}",
        cluster.logs()
    );
    assert!(cluster.wait_peers(1, &[0], Duration::from_secs(5)), "{}", cluster.logs());
    assert!(cluster.hosts[1].agent_log().contains("resyncing"), "B's watch did not notice member 0's death");
    pods_talk(&cluster.hosts[0], &cluster.hosts[1]).unwrap();
    pods_talk(&cluster.hosts[1], &cluster.hosts[0]).unwrap();
}

/// SIGTERM with --revoke-on-exit: B exits cleanly and A drops B at once (no TTL wait).
fn b_revoking_on_sigterm_is_dropped_at_once(cluster: &mut Cluster, endpoints: &[String], subnet_b: Ipv4Net) {
    cluster.hosts[1].kill_agent();
    cluster.hosts[1].start_agent(endpoints, &["--revoke-on-exit"]);
    assert!(cluster.wait_peers(0, &[1], Duration::from_secs(5)), "{}", cluster.logs());
    let mut agent_b = cluster.hosts[1].agent.take().unwrap();
    cni_os::process::kill(agent_b.id(), cni_os::process::Signal::TERM)
        .expect("SIGTERM to our own agent child");
    let status = agent_b.wait().unwrap();
    assert!(status.success(), "agent exit on SIGTERM: {status}\n{}", cluster.hosts[1].agent_log());
    assert!(record(cluster, &cluster.hosts[1]).is_none(), "the revoked lease took B's record");
    let gone =
        wait_for(Duration::from_secs(2), || (!cluster.hosts[0].entries().has_subnet(subnet_b)).then_some(()));
    assert!(gone.is_some(), "A kept B's entries after B's revoke\n{}", cluster.logs());
}
