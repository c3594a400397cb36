//! The overlay agent against hostile records in etcd: subnet records another node (or
//! anyone able to write to etcd) planted beside the genuine peers' — the whole address
//! space, a /8, subnets outside the pod network, of the wrong length, covering the node's
//! own subnet, pointing at a multicast underlay, stealing a peer's VTEP MAC, on no lease.
//! The genuine peers get their route, neighbour and FDB entry on every node (netlink dumps
//! of each node's namespace) and no hostile record gets any. Also: a peer the kernel
//! refuses is retried while the others converge; TLS to etcd with client certificates; a
//! hostile etcd member ahead of the genuine one. Needs root and Debian's etcd-server.
//! Names carry `ot`.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use crate::harness::{wait_for, Cluster, DEVICE, PREFIX};
use cni_net::netlink::AddressFlags;
use cni_overlay::dataplane::vtep_mac;
use cni_testkit::etcd::{EtcdCluster, HostileMember, Hostility};
use ipnet::{IpNet, Ipv4Net};

/// An underlay address on the test's underlay network that no host has.
const EVIL: Ipv4Addr = Ipv4Addr::new(192, 168, 91, 66);

fn value(node: &str, underlay: Ipv4Addr, mac: Option<&str>) -> Vec<u8> {
    let mac = mac.map(str::to_string).unwrap_or_else(|| vtep_mac(underlay).to_string());
    format!(r#"{{"node":"{node}","underlay":"{underlay}","vtepMac":"{mac}"}}"#).into_bytes()
}

fn key(subnet: &str) -> String {
    format!("{PREFIX}/subnets/{subnet}")
}

/// The subnets and underlay addresses no host may have entries for.
struct Hostile {
    keys: Vec<String>,
    subnets: Vec<Ipv4Net>,
    underlays: Vec<Ipv4Addr>,
}

impl Hostile {
    fn write(&mut self, cluster: &Cluster, lease: i64, subnet: &str, value: Vec<u8>) {
        let key = key(subnet);
        cluster.etcd.client().put(key.as_bytes(), &value, lease).unwrap();
        if let Some((addr, len)) = subnet.split_once('-') {
            self.subnets.push(Ipv4Net::new(addr.parse().unwrap(), len.parse().unwrap()).unwrap());
        }
        self.keys.push(key);
    }

    /// Host `i` has no route, neighbour or FDB entry of any hostile record.
    fn assert_absent(&self, cluster: &Cluster, i: usize) {
        let entries = cluster.hosts[i].entries();
        for subnet in &self.subnets {
            let routed = entries.routes.iter().any(|r| r.destination == IpNet::V4(*subnet));
            assert!(!routed, "host {i} routes hostile {subnet}: {entries:?}\n{}", cluster.logs());
        }
        for underlay in &self.underlays {
            assert!(!entries.has_underlay(*underlay), "host {i} sends to hostile {underlay}: {entries:?}");
        }
    }
}

#[test]
fn hostile_records_get_no_entries_and_the_genuine_peers_converge() {
    let mut cluster = Cluster::start("ot", EtcdCluster::start("ot", 1), 3);
    let endpoints = cluster.etcd.endpoints();
    let lease = cluster.etcd.client().lease_grant(600).unwrap();
    let mut hostile = Hostile { keys: Vec::new(), subnets: Vec::new(), underlays: vec![EVIL] };
    plant_before_the_agents(&cluster, &mut hostile, lease);
    let member = HostileMember::start(Hostility::ClaimsHugeMessage);
    let obstacle = start_agents_with_a_refused_route_to_b(&mut cluster, &endpoints, &member);
    plant_while_the_agents_watch(&cluster, &mut hostile, lease);
    a_converges_around_the_refused_peer(&cluster);
    the_retry_completes_the_mesh_once_the_obstacle_is_gone(&cluster, obstacle);
    every_hostile_record_is_refused_once_with_its_reason(&cluster, &hostile);
    pods_talk_across_the_overlay(&mut cluster);
}

fn evil() -> Vec<u8> {
    value("ot-evil", EVIL, None)
}

/// Read by the agents' first full listing: the whole space, /8s, outside the pod network,
/// the pod network itself, the wrong length, a multicast underlay, a peer's VTEP MAC, and a
/// record on no lease.
fn plant_before_the_agents(cluster: &Cluster, hostile: &mut Hostile, lease: i64) {
    hostile.write(cluster, lease, "0.0.0.0-0", evil());
    hostile.write(cluster, lease, "1.0.0.0-8", evil());
    hostile.write(cluster, lease, "128.0.0.0-1", evil());
    hostile.write(cluster, lease, "10.250.0.0-24", evil());
    hostile.write(cluster, lease, "10.244.0.0-16", evil());
    hostile.write(cluster, lease, "10.244.251.0-25", evil());
    let multicast = Ipv4Addr::new(239, 1, 1, 1);
    hostile.underlays.push(multicast);
    hostile.write(cluster, lease, "10.244.252.0-24", value("ot-evil", multicast, None));
    let b_mac = vtep_mac(cluster.hosts[1].underlay).to_string();
    hostile.write(cluster, lease, "10.244.253.0-24", value("ot-evil", EVIL, Some(&b_mac)));
    hostile.write(cluster, 0, "10.244.254.0-24", evil());
}

/// The address on A's loopback that makes the kernel refuse A's route to B.
struct Obstacle {
    address: IpNet,
    lo: u32,
}

/// B and C first; A starts with B's VTEP address on its loopback, so the kernel refuses
/// B's route on A (EINVAL: the gateway is a local address). C's first endpoint is a
/// hostile member: C fails over to the genuine one.
fn start_agents_with_a_refused_route_to_b(
    cluster: &mut Cluster,
    endpoints: &[String],
    member: &HostileMember,
) -> Obstacle {
    cluster.hosts[1].start_agent(endpoints, &[]);
    let c_endpoints = [vec![member.endpoint()], endpoints.to_vec()].concat();
    cluster.hosts[2].start_agent(&c_endpoints, &[]);
    let b_subnet = cluster.hosts[1].subnet().expect("B's subnet");
    let mut a_nl = cluster.hosts[0].netlink();
    let lo = a_nl.require_link("lo").unwrap().index;
    a_nl.set_link_up(lo).unwrap();
    let address = IpNet::V4(Ipv4Net::new(b_subnet.network(), 32).unwrap());
    a_nl.add_address(lo, address, AddressFlags::empty()).unwrap();
    cluster.hosts[0].start_agent(endpoints, &[]);
    Obstacle { address, lo }
}

/// Seen through the watch: records covering A's own subnet, and another /8.
fn plant_while_the_agents_watch(cluster: &Cluster, hostile: &mut Hostile, lease: i64) {
    let a_subnet = cluster.hosts[0].subnet().expect("A's subnet");
    let [_, _, x, _] = a_subnet.network().octets();
    hostile.write(cluster, lease, &format!("10.244.{}.0-23", x & !1), evil());
    hostile.write(cluster, lease, &format!("10.244.{x}.0-25"), evil());
    hostile.write(cluster, lease, &format!("10.244.{x}.128-25"), evil());
    hostile.write(cluster, lease, "2.0.0.0-8", evil());
}

/// A: C converged around B, whose route the kernel refused; B's FDB entry and neighbour
/// are in place.
fn a_converges_around_the_refused_peer(cluster: &Cluster) {
    let b_subnet = cluster.hosts[1].subnet().expect("B's subnet");
    let c_subnet = cluster.hosts[2].subnet().expect("C's subnet");
    let converged_around_b = wait_for(Duration::from_secs(10), || {
        let entries = cluster.hosts[0].entries();
        let c = entries.routes.iter().any(|r| r.destination == IpNet::V4(c_subnet));
        let b = entries.has_underlay(cluster.hosts[1].underlay);
        (c && b && cluster.hosts[0].agent_log().contains("failure=peer ot-b")).then_some(())
    });
    assert!(converged_around_b.is_some(), "{:?}\n{}", cluster.hosts[0].entries(), cluster.logs());
    let entries = cluster.hosts[0].entries();
    assert!(!entries.routes.iter().any(|r| r.destination == IpNet::V4(b_subnet)), "{entries:?}");
}

/// The obstacle gone, the retry gives A B's route too.
fn the_retry_completes_the_mesh_once_the_obstacle_is_gone(cluster: &Cluster, obstacle: Obstacle) {
    cluster.hosts[0].netlink().delete_address(obstacle.lo, obstacle.address).unwrap();
    cluster.assert_full_mesh(Duration::from_secs(10));
}

/// Every hostile record was seen (the last ones through the watch) and refused, and each
/// refusal is logged once (per change of the record), with its key and reason.
fn every_hostile_record_is_refused_once_with_its_reason(cluster: &Cluster, hostile: &Hostile) {
    let last = refusal_of(hostile.keys.last().unwrap());
    let seen = wait_for(Duration::from_secs(10), || {
        cluster.hosts.iter().all(|h| h.agent_log().contains(&last)).then_some(())
    });
    assert!(seen.is_some(), "{}", cluster.logs());
    for i in 0..3 {
        assert!(cluster.wait_peers(i, &cluster.others(i), Duration::ZERO));
        hostile.assert_absent(cluster, i);
    }
    let log = cluster.hosts[0].agent_log();
    for key in &hostile.keys {
        let lines = log.matches(&refusal_of(key)).count();
        assert_eq!(lines, 1, "{key} logged {lines} times:\n{log}");
    }
    for (subnet, reason) in [
        ("0.0.0.0-0", "outside --network"),
        ("10.244.0.0-16", "is a /16"),
        ("10.244.252.0-24", "underlay 239.1.1.1 is not unicast"),
        ("10.244.253.0-24", "derived from underlay"),
        ("10.244.254.0-24", "not bound to a lease"),
    ] {
        let line = refusal_of(&key(subnet));
        let at = log.find(&line).unwrap_or_else(|| panic!("no refusal of {subnet}:\n{log}"));
        assert!(log[at..].lines().next().unwrap().contains(reason), "{subnet}: {log}");
    }
}

/// Pods on different nodes talk across the overlay (real traffic, not only entries).
fn pods_talk_across_the_overlay(cluster: &mut Cluster) {
    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts[..2] {
        host.add_pod(&plugins);
    }
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let server = cni_testkit::traffic::tcp_echo_server(
        b.pod.as_ref().unwrap().netns(),
        std::net::SocketAddr::new(IpAddr::V4(b.pod_ip.unwrap()), 0),
    )
    .unwrap();
    cni_testkit::traffic::tcp_echo(
        a.pod.as_ref().unwrap().netns(),
        server.local_addr(),
        b"ot",
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("A's pod -> B's pod: {e}\n{}", cluster.logs()));
}

#[test]
fn agents_reach_etcd_over_tls_with_client_certificates() {
    let mut cluster = Cluster::start("ot", EtcdCluster::start_tls("ot", 1), 2);
    let endpoints = cluster.etcd.endpoints();
    assert!(endpoints.iter().all(|e| e.starts_with("https://")), "{endpoints:?}");
    let pki = cluster.etcd.pki().unwrap().clone();
    let [ca, cert, key] = [&pki.ca, &pki.client_cert, &pki.client_key].map(|p| p.display().to_string());

    // Without a client certificate the member refuses the agent: a clear error, exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_cni-overlay-agent"))
        .args([
            "--etcd-endpoints",
            &endpoints.join(","),
            "--iface",
            "ovu0",
            "--node",
            "ot-a",
            "--ca-file",
            &ca,
        ])
        .args(["--prefix", PREFIX, "--device", DEVICE, "--netns"])
        .arg(cluster.hosts[0].ns().path())
        .arg("--subnet-file")
        .arg(cluster.hosts[0].subnet_file())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("TLS") && stderr.contains("certFile"), "{stderr}");
    assert!(cluster.hosts[0].subnet().is_none(), "a subnet was written without etcd");

    let tls = ["--ca-file", &ca, "--cert-file", &cert, "--key-file", &key];
    for host in &mut cluster.hosts {
        host.start_agent(&endpoints, &tls);
    }
    assert!(cluster.wait_peers(0, &[1], Duration::from_secs(10)), "{}", cluster.logs());
    assert!(cluster.wait_peers(1, &[0], Duration::from_secs(10)), "{}", cluster.logs());
}

/// A running agent whose only live member turns out hostile (the genuine one dies, the
/// next endpoint answers with a message claiming 1 GB) logs the refusal and keeps running: no
/// abort, and its device and subnet stay.
#[test]
fn a_hostile_member_mid_run_is_logged_and_the_agent_keeps_running() {
    let mut cluster = Cluster::start("ot", EtcdCluster::start("ot", 1), 1);
    let member = HostileMember::start(Hostility::ClaimsHugeMessage);
    let endpoints = [cluster.etcd.endpoints(), vec![member.endpoint()]].concat();
    cluster.hosts[0].start_agent(&endpoints, &[]);
    cluster.etcd.kill(0);
    let logged = wait_for(Duration::from_secs(10), || {
        cluster.hosts[0]
            .agent_log()
            .contains("over the 8 MiB limit: Error, decoded message length too large: found 1000000000 bytes")
            .then_some(())
    });
    assert!(logged.is_some(), "{}", cluster.logs());
    let host = &mut cluster.hosts[0];
    let status = host.agent.as_mut().unwrap().try_wait().unwrap();
    assert!(status.is_none(), "the agent exited: {status:?}\n{}", host.agent_log());
    assert!(host.netlink().link_by_name(DEVICE).unwrap().is_some(), "the device went");
    assert!(host.subnet().is_some(), "the subnet file went");
}

/// How the agent's log names the refusal of the record at `key` (the key quoted, the
/// reason after it on the line).
fn refusal_of(key: &str) -> String {
    format!("refused a node record key={key:?} reason=")
}
