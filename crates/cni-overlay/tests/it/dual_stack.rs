//! The dual-stack overlay on the real kernel with a real etcd: three hosts with
//! `--network6`, once over an IPv4 underlay and once over an IPv6 one (VXLAN's outer
//! header of the underlay's family). Each host gets an IPv6 subnet paired with its IPv4
//! one, every peer a route per family on the VXLAN device, the conflist a range per family,
//! and pods on every pair of hosts talk TCP both ways over IPv4 and IPv6. Records claiming
//! an IPv6 subnet that is not theirs, or an underlay of the wrong family, get nothing.
//! With `--backend auto` the underlay's family goes direct and the other over VXLAN.
//! Needs root and Debian's etcd-server. Names carry `or`.

use std::net::IpAddr;
use std::time::Duration;

use crate::harness::{pods_talk_over, Cluster, Layout, DEVICE, PREFIX};
use cni_overlay::dataplane::vtep_mac;
use cni_testkit::etcd::EtcdCluster;
use ipnet::{IpNet, Ipv6Net};
use serde_json::Value;

/// How long the entries may take to converge: generous, as the machine may be busy (only a
/// failing run waits this long).
const WAIT: Duration = Duration::from_secs(30);
const NETWORK6: &str = "fd00:244::/48";

/// Records planted by someone able to write to etcd: each on a lease, under a key of the
/// network. Returns the subnets (both families) no host may route.
fn plant_hostile_records(cluster: &Cluster) -> Vec<IpNet> {
    let lease = cluster.etcd.client().lease_grant(600).unwrap();
    let own_family = cluster.hosts[0].underlay;
    let other_family: IpAddr = match own_family {
        IpAddr::V4(_) => "fd00:91::66".parse().unwrap(),
        IpAddr::V6(_) => "192.168.91.66".parse().unwrap(),
    };
    let same_family: IpAddr = match own_family {
        IpAddr::V4(_) => "192.168.91.66".parse().unwrap(),
        IpAddr::V6(_) => "fd00:91::66".parse().unwrap(),
    };
    let record = |underlay: IpAddr, subnet6: &str| {
        format!(
            r#"{{"node":"or-evil","underlay":"{underlay}","vtepMac":"{}","subnet6":"{subnet6}"}}"#,
            vtep_mac(underlay)
        )
    };
    let planted = [
        // An IPv6 subnet outside --network6, one of the wrong length, and the whole
        // network: each under a key whose paired subnet is another.
        ("10.244.240.0-24", record(same_family, "2001:db8:66::/64")),
        ("10.244.241.0-24", record(same_family, "fd00:244:0:f1::/56")),
        ("10.244.242.0-24", record(same_family, "fd00:244::/48")),
        // Another key's IPv6 subnet (that of 10.244.1.0/24 and of 10.244.2.0/24).
        ("10.244.243.0-24", record(same_family, "fd00:244:0:1::/64")),
        ("10.244.244.0-24", record(same_family, "fd00:244:0:2::/64")),
        // A correct pairing, but an underlay of the other family than the VXLAN device's.
        ("10.244.245.0-24", record(other_family, "fd00:244:0:f5::/64")),
    ];
    let mut hostile = Vec::new();
    for (key, value) in planted {
        cluster
            .etcd
            .client()
            .put(format!("{PREFIX}/subnets/{key}").as_bytes(), value.as_bytes(), lease)
            .unwrap();
        let (addr, len) = key.split_once('-').unwrap();
        hostile.push(format!("{addr}/{len}").parse().unwrap());
    }
    for third in 240..=245 {
        hostile.push(format!("fd00:244:0:{third:x}::/64").parse().unwrap());
    }
    hostile.extend(
        ["2001:db8:66::/64", "fd00:244:0:f1::/56", "fd00:244::/48"].map(|s| s.parse::<IpNet>().unwrap()),
    );
    hostile
}

/// Each host's (IPv4, IPv6) subnets.
type Subnets = Vec<(IpNet, IpNet)>;

fn dual_stack_overlay(prefix: &str, layout: Layout, backend: &str) {
    let mut cluster = Cluster::start_with(prefix, EtcdCluster::start(prefix, 1), 3, &layout);
    let endpoints = cluster.etcd.endpoints();
    let hostile = plant_hostile_records(&cluster);
    for host in &mut cluster.hosts {
        host.start_agent(&endpoints, &["--network6", NETWORK6, "--backend", backend]);
    }
    let subnets = each_host_has_the_paired_ipv6_subnet(&cluster);
    for i in 0..3 {
        if backend == "auto" {
            wait_underlay_family_direct_other_over_vxlan(&cluster, &layout, &subnets, i);
        } else {
            wait_a_route_per_family_and_peer_on_the_device(&cluster, &subnets, i);
        }
        assert_hostile_records_got_nothing(&cluster, &hostile, i);
    }
    // VXLAN's overhead is that of the underlay's family.
    let overhead = if layout.ipv6 { 70 } else { 50 };
    let underlay_mtu = cluster.hosts[0].netlink().require_link("ovu0").unwrap().mtu;
    assert_eq!(cluster.hosts[0].netlink().require_link(DEVICE).unwrap().mtu, underlay_mtu - overhead);

    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts {
        host.add_pod(&plugins);
        assert!(host.pod_ip6.is_some(), "{}'s pod got no IPv6 address", host.name);
    }
    cluster.all_pods_talk(true);
    a_record_claiming_anothers_ipv6_subnet_is_dropped_in_both_families(&cluster, &subnets);
}

/// Each host's IPv6 subnet is the one paired with its IPv4 one (the n-th of each network);
/// its record carries it, and its conflist has a range (and a default route) per family.
fn each_host_has_the_paired_ipv6_subnet(cluster: &Cluster) -> Subnets {
    let subnets: Subnets = cluster
        .hosts
        .iter()
        .map(|h| {
            (IpNet::V4(h.subnet().unwrap()), IpNet::V6(h.subnet6().expect("an IPv6 subnet in the env file")))
        })
        .collect();
    for (i, host) in cluster.hosts.iter().enumerate() {
        let IpNet::V4(v4) = subnets[i].0 else { unreachable!() };
        let n = u32::from(v4.network()) - u32::from(std::net::Ipv4Addr::new(10, 244, 0, 0));
        let paired: Ipv6Net = format!("fd00:244:0:{:x}::/64", n >> 8).parse().unwrap();
        assert_eq!(subnets[i].1, IpNet::V6(paired), "{}", host.name);
        let key = format!("{PREFIX}/subnets/{}-24", v4.network());
        let kv = cluster.etcd.client().get(key.as_bytes()).unwrap().expect("the host's record");
        let record: Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(record["subnet6"], paired.to_string());
        assert_eq!(record["underlay"], host.underlay.to_string());
        let conflist: Value =
            serde_json::from_str(&std::fs::read_to_string(host.conflist_path()).unwrap()).unwrap();
        let ipam = &conflist["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], v4.to_string());
        assert_eq!(ipam["ranges"][1][0]["subnet"], paired.to_string());
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
    }
    subnets
}

/// `--backend auto`: every peer is on-link, so its subnet of the underlay's family is
/// routed via its underlay address, the other family's over VXLAN (a next hop is of its
/// route's family).
fn wait_underlay_family_direct_other_over_vxlan(
    cluster: &Cluster,
    layout: &Layout,
    subnets: &Subnets,
    i: usize,
) {
    let peers = cluster.others(i);
    let underlay = |p: usize| cluster.hosts[p].underlay;
    let same = |p: usize| if layout.ipv6 { subnets[p].1 } else { subnets[p].0 };
    let other = |p: usize| if layout.ipv6 { subnets[p].0 } else { subnets[p].1 };
    let mut direct: Vec<(IpNet, IpAddr)> = peers.iter().map(|&p| (same(p), underlay(p))).collect();
    direct.sort();
    let mut vxlan: Vec<IpNet> = peers.iter().map(|&p| other(p)).collect();
    vxlan.sort();
    cluster.wait_entries(i, WAIT, "one family direct, the other over VXLAN", |e| {
        e.direct_routes() == direct
            && e.vxlan_routes() == vxlan
            && e.neighbours.len() == 2
            && e.fdb.len() == 2
            && peers.iter().all(|&p| e.has_underlay(underlay(p)))
    });
}

/// `--backend vxlan`: both families of every peer over the device.
fn wait_a_route_per_family_and_peer_on_the_device(cluster: &Cluster, subnets: &Subnets, i: usize) {
    let peers = cluster.others(i);
    let underlay = |p: usize| cluster.hosts[p].underlay;
    let mut want: Vec<IpNet> = peers.iter().flat_map(|&p| [subnets[p].0, subnets[p].1]).collect();
    want.sort();
    cluster.wait_entries(i, WAIT, "a route per family and peer on the device", |e| {
        e.direct.is_empty()
            && e.vxlan_routes() == want
            && e.neighbours.len() == 4
            && e.fdb.len() == 2
            && peers.iter().all(|&p| e.has_underlay(underlay(p)))
    });
}

/// Host `i` routes none of the hostile subnets, and its agent logged why it refused them.
fn assert_hostile_records_got_nothing(cluster: &Cluster, hostile: &[IpNet], i: usize) {
    let entries = cluster.hosts[i].entries();
    for subnet in hostile {
        assert!(
            !entries.routes_to(*subnet),
            "host {i} routes hostile {subnet}: {entries:?}\n{}",
            cluster.logs()
        );
    }
    let log = cluster.hosts[i].agent_log();
    assert!(log.contains("the IPv6 subnet paired with 10.244.240.0/24"), "{log}");
    assert!(log.contains("is not of the family of this node's underlay"), "{log}");
}

/// C's record rewritten in place (same key, same lease) to claim A's IPv6 subnet: A and B
/// drop C in both families at once; the genuine record back, C returns.
fn a_record_claiming_anothers_ipv6_subnet_is_dropped_in_both_families(cluster: &Cluster, subnets: &Subnets) {
    let IpNet::V4(c_v4) = subnets[2].0 else { unreachable!() };
    let c_key = format!("{PREFIX}/subnets/{}-24", c_v4.network());
    let genuine = cluster.etcd.client().get(c_key.as_bytes()).unwrap().expect("C's record");
    let mut forged: Value = serde_json::from_slice(&genuine.value).unwrap();
    forged["subnet6"] = subnets[0].1.to_string().into();
    cluster.etcd.client().put(c_key.as_bytes(), forged.to_string().as_bytes(), genuine.lease).unwrap();
    for i in [0, 1] {
        cluster.wait_entries(i, WAIT, "C dropped in both families", |e| {
            !e.routes_to(subnets[2].0)
                && !e.routes_to(subnets[2].1)
                && !e.has_underlay(cluster.hosts[2].underlay)
        });
        // The other peer is untouched, and A's own subnet is routed nowhere but locally.
        let entries = cluster.hosts[i].entries();
        assert!(entries.routes_to(subnets[1 - i].0) && entries.routes_to(subnets[1 - i].1), "{entries:?}");
        assert!(!entries.routes_to(subnets[i].1), "host {i} routes its own subnet away: {entries:?}");
    }
    cluster.etcd.client().put(c_key.as_bytes(), &genuine.value, genuine.lease).unwrap();
    for i in [0, 1] {
        cluster.wait_entries(i, WAIT, "C back in both families", |e| {
            e.routes_to(subnets[2].0) && e.routes_to(subnets[2].1)
        });
    }
    for from in [0, 1] {
        pods_talk_over(&cluster.hosts[from], &cluster.hosts[2], true).unwrap();
    }
}

#[test]
fn dual_stack_over_an_ipv4_underlay() {
    dual_stack_overlay("or4", Layout { ipv6: false, routed: vec![] }, "vxlan");
}

#[test]
fn dual_stack_over_an_ipv6_underlay() {
    dual_stack_overlay("or6", Layout { ipv6: true, routed: vec![] }, "vxlan");
}

/// `--backend auto` on one segment, dual-stack: each family takes its own path to the
/// same peer (direct for the underlay's, VXLAN for the other), once per underlay family.
#[test]
fn dual_stack_auto_over_an_ipv6_underlay() {
    dual_stack_overlay("ora6", Layout { ipv6: true, routed: vec![] }, "auto");
}

#[test]
fn dual_stack_auto_over_an_ipv4_underlay() {
    dual_stack_overlay("ora4", Layout { ipv6: false, routed: vec![] }, "auto");
}
