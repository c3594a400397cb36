//! Its own binary, not a module of `it`: the kernel rig runs this binary's `#[ignore]`d
//! tests inside a QEMU VM and fails unless every one of them passed.
//!
//! `--backend wireguard` on a kernel with WireGuard: Debian's, in QEMU (`tools/kernel-rig`);
//! this machine's kernel has none. Three hosts on an underlay bridge, one etcd member, an
//! agent and a dual-stack pod per host: TCP between the pods of every pair while a capture
//! on the underlay sees only WireGuard's UDP and never the payload; a host's key rotated
//! (the others' devices drop the old key for the new and traffic resumes); a host removed
//! (its peer leaves the others' devices). One scenario, run over an IPv4 underlay and over
//! an IPv6-only one (endpoints `[v6]:port`, the 40-byte outer header in the MTU).
//!
//! `kernel_rig_runs_the_wireguard_tests` boots one VM and runs this binary's ignored tests
//! inside it. By hand (the binary is printed by `cargo test --no-run`):
//!
//!     tools/kernel-rig -- target/debug/deps/kernel_wireguard-<hash> --ignored

// The `it` binary's harness: this binary uses only part of it.
#[path = "it/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cni_net::wireguard::{self, Key, WgDevice, WireGuard};
use cni_testkit::capture::Capture;
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, udp_echo, udp_echo_server};
use harness::{wait_for, Cluster, Host, Layout, PREFIX};

/// The WireGuard device's name in every host (names in this test carry `wg`).
const WG_DEVICE: &str = "wgdev0";
const WG_PORT: u16 = 51820;
/// Dual-stack: each peer's allowed IPs are its IPv4 and IPv6 pod subnets.
const NETWORK6: &str = "fd00:244::/48";
/// Written by the pods; must never be seen on the underlay.
const MARKER: &[u8] = b"wg-rig-plaintext-marker";
/// Slow: the guest is emulated (TCG), with 3 agents, etcd and the crypto on 1-2 CPUs.
const CONVERGE: Duration = Duration::from_secs(60);
/// The agents' lease TTL: the agent's default. The host tests' 3 s is too short here: with
/// two scenarios' transfers on an emulated CPU of a busy host, keep-alives a second apart
/// were seen to miss it and records to vanish and come back.
const LEASE_TTL: u64 = 10;

#[test]
fn kernel_rig_runs_the_wireguard_tests() {
    // The guest sees the host's file system read-only: build and install what it runs now.
    harness::plugin_dir();
    cni_testkit::kernel_rig::run_ignored_tests_in_rig();
}

fn key_file(host: &Host) -> PathBuf {
    host.dir.join("wg/wireguard.key")
}

fn start(host: &mut Host, endpoints: &[String]) {
    let key = key_file(host);
    let args = [
        "--backend",
        "wireguard",
        "--device",
        WG_DEVICE,
        "--wg-key-file",
        key.to_str().unwrap(),
        "--network6",
        NETWORK6,
    ];
    host.start_agent(endpoints, &args);
}

fn device(host: &Host) -> WgDevice {
    let mut wg = WireGuard::in_ns(host.ns().netns()).expect("the wireguard family in the guest's kernel");
    let index = host.netlink().require_link(WG_DEVICE).expect("the WireGuard device").index;
    wg.device(index).expect("dump the WireGuard device")
}

/// The public key host publishes in its record.
fn published_key(cluster: &Cluster, host: &Host) -> Option<Key> {
    let subnet = host.subnet()?;
    let key = format!("{PREFIX}/subnets/{}-{}", subnet.network(), subnet.prefix_len());
    let kv = cluster.etcd.client().get(key.as_bytes()).unwrap()?;
    let record: serde_json::Value = serde_json::from_slice(&kv.value).unwrap();
    assert_eq!(record["wgPort"], WG_PORT, "{record}");
    wireguard::parse_key(record["wgPublicKey"].as_str()?).ok()
}

/// Waits until host `i`'s device holds exactly `keys` as peers, each with the owner's pod
/// subnets (IPv4 and IPv6) as allowed IPs and its underlay address and port as endpoint.
fn wait_device_peers(cluster: &Cluster, i: usize, peers: &[usize], keys: &[Key]) {
    let want: Vec<(Key, SocketAddr, Vec<ipnet::IpNet>)> = peers
        .iter()
        .zip(keys)
        .map(|(&p, key)| {
            let host = &cluster.hosts[p];
            let subnets = vec![host.subnet().unwrap().into(), host.subnet6().unwrap().into()];
            (*key, SocketAddr::new(host.underlay, WG_PORT), subnets)
        })
        .collect();
    let reached = wait_for(CONVERGE, || {
        let device = device(&cluster.hosts[i]);
        let exact = device.peers.len() == want.len()
            && want.iter().all(|(key, endpoint, subnets)| {
                device.peers.iter().any(|p| {
                    let mut allowed = p.allowed_ips.clone();
                    allowed.sort();
                    p.public_key == *key && p.endpoint == Some(*endpoint) && allowed == *subnets
                })
            });
        exact.then_some(())
    });
    assert!(
        reached.is_some(),
        "host {i}: peers {:?}, want {want:?}\n{}",
        device(&cluster.hosts[i]).peers,
        cluster.logs()
    );
}

/// TCP carrying [`MARKER`] from `from`'s pod to `to`'s pod, over IPv4 and over IPv6.
fn pods_talk(from: &Host, to: &Host) -> Result<(), String> {
    pods_talk_to(from, to, to.pod_ip.unwrap().into())?;
    pods_talk_to(from, to, to.pod_ip6.ok_or("no IPv6 pod address")?.into())
}

fn pods_talk_to(from: &Host, to: &Host, address: std::net::IpAddr) -> Result<(), String> {
    let target = SocketAddr::new(address, 0);
    let server = tcp_echo_server(to.pod.as_ref().unwrap().netns(), target).map_err(|e| e.to_string())?;
    let payload: Vec<u8> = MARKER.iter().copied().cycle().take(32 * 1024).collect();
    tcp_echo(from.pod.as_ref().unwrap().netns(), server.local_addr(), &payload, Duration::from_secs(20))
        .map_err(|e| format!("{} -> {} ({address}): {e}", from.name, to.name))
}

fn all_pairs_talk(cluster: &Cluster, hosts: &[usize]) {
    for &from in hosts {
        for &to in hosts.iter().filter(|&&t| t != from) {
            pods_talk(&cluster.hosts[from], &cluster.hosts[to])
                .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        }
    }
}

#[test]
#[ignore = "needs a kernel with WireGuard: run inside the kernel rig by kernel_rig_runs_the_wireguard_tests"]
fn wireguard_over_an_ipv4_underlay_encrypts_rotates_and_drops_peers() {
    wireguard_encrypts_rotates_and_drops_peers("wg", Layout { ipv6: false, routed: vec![] });
}

#[test]
#[ignore = "needs a kernel with WireGuard: run inside the kernel rig by kernel_rig_runs_the_wireguard_tests"]
fn wireguard_over_an_ipv6_underlay_encrypts_rotates_and_drops_peers() {
    wireguard_encrypts_rotates_and_drops_peers("w6", Layout { ipv6: true, routed: vec![] });
}

/// WireGuard's outer IP header, UDP, its data header and authentication tag: spelled out
/// here rather than taken from the agent's constants, so a wrong constant fails the test.
fn wireguard_overhead(layout: &Layout) -> u32 {
    if layout.ipv6 {
        40 + 8 + 16 + 16
    } else {
        20 + 8 + 16 + 16
    }
}

/// The ethertype the underlay's packets between hosts carry.
fn underlay_ethertype(layout: &Layout) -> u16 {
    if layout.ipv6 {
        0x86dd
    } else {
        0x0800
    }
}

/// The scenario, every name in it carrying `prefix`, the hosts' underlay laid out by `layout`.
fn wireguard_encrypts_rotates_and_drops_peers(prefix: &str, layout: Layout) {
    cni_testkit::kernel_rig::require_rig();
    let mut cluster = Cluster::start_with(prefix, EtcdCluster::start(prefix, 1), 3, &layout);
    for host in &mut cluster.hosts {
        assert_eq!(host.underlay.is_ipv6(), layout.ipv6, "{}: underlay {}", host.name, host.underlay);
        host.ttl = LEASE_TTL;
    }
    let endpoints = cluster.etcd.endpoints();
    for host in &mut cluster.hosts {
        start(host, &endpoints);
    }
    let keys = devices_carry_the_published_keys_and_the_overhead(&cluster, &layout);
    for i in 0..3 {
        let peers = cluster.others(i);
        let peer_keys: Vec<Key> = peers.iter().map(|&p| keys[p]).collect();
        wait_device_peers(&cluster, i, &peers, &peer_keys);
    }
    let plugins = cluster.plugins.clone();
    for host in &mut cluster.hosts {
        host.add_pod(&plugins);
    }
    the_underlay_carries_only_wireguard(&cluster, &layout, prefix);
    the_capture_sees_plaintext_sent_in_clear(&cluster);
    let rotated = a_rotated_key_replaces_the_old_on_every_peer(&mut cluster, &endpoints, &keys);
    a_removed_host_leaves_the_peers_devices_and_routes(&mut cluster, &[keys[0], rotated]);
}

/// Each device's public key is the one its host published, the key file is the node's
/// alone (0600), and the MTU leaves room for WireGuard's overhead. Returns the keys.
fn devices_carry_the_published_keys_and_the_overhead(cluster: &Cluster, layout: &Layout) -> Vec<Key> {
    let keys: Vec<Key> =
        cluster.hosts.iter().map(|h| published_key(cluster, h).expect("a published key")).collect();
    for (host, key) in cluster.hosts.iter().zip(&keys) {
        assert_eq!(device(host).public_key, Some(*key), "{}", host.name);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(key_file(host)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let mtu = host.netlink().require_link(WG_DEVICE).unwrap().mtu;
        assert_eq!(mtu, host.netlink().require_link("ovu0").unwrap().mtu - wireguard_overhead(layout));
    }
    keys
}

/// Every pair talks while the underlay is captured: only UDP to or from WireGuard's port
/// crosses it between the hosts (ARP and IPv6 neighbour discovery aside), and the pods'
/// payload never does.
fn the_underlay_carries_only_wireguard(cluster: &Cluster, layout: &Layout, prefix: &str) {
    let capture = Capture::start(cluster.underlay_ns.netns()).unwrap();
    all_pairs_talk(cluster, &[0, 1, 2]);
    let frames = capture.stop().unwrap();
    let mut wireguard_frames = 0;
    for frame in &frames {
        assert!(!frame.contains(MARKER), "the pods' payload crossed the underlay in clear: {frame:?}");
        match frame.transport() {
            // ARP; ICMPv6 and hop-by-hop (MLD) of the link-local addresses.
            None => {}
            Some(t) if t.protocol == 58 || t.protocol == 0 => {}
            Some(t) => {
                let ports = t.ports.unwrap_or_default();
                assert!(
                    t.protocol == 17 && (ports.0 == WG_PORT || ports.1 == WG_PORT),
                    "a packet other than WireGuard's on the underlay: {t:?}"
                );
                assert_eq!(
                    frame.ethertype(),
                    Some(underlay_ethertype(layout)),
                    "WireGuard over the other family than the underlay's: {frame:?}"
                );
                wireguard_frames += 1;
            }
        }
    }
    println!("{prefix} underlay capture: {} frames, {wireguard_frames} of them WireGuard UDP", frames.len());
    // 12 transfers (6 pairs, 2 families) of 32 KiB each way: far more than a few handshakes' worth.
    assert!(wireguard_frames > 100, "only {wireguard_frames} WireGuard frames of {} captured", frames.len());
}

/// The same capture does see the marker when it crosses in clear (UDP between two hosts'
/// underlay addresses): the check of [`the_underlay_carries_only_wireguard`] could fail.
fn the_capture_sees_plaintext_sent_in_clear(cluster: &Cluster) {
    let capture = Capture::start(cluster.underlay_ns.netns()).unwrap();
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let server = udp_echo_server(b.ns().netns(), SocketAddr::new(b.underlay, 0)).unwrap();
    udp_echo(a.ns().netns(), server.local_addr(), MARKER, Duration::from_secs(5)).unwrap();
    let clear = capture.stop().unwrap();
    assert!(clear.iter().any(|f| f.contains(MARKER)), "the capture missed plaintext: {} frames", clear.len());
}

/// Rotation: host 1's key file deleted and its agent restarted. The others drop the old
/// key for the new one (same lease, same subnet), and traffic resumes. Returns the new key.
fn a_rotated_key_replaces_the_old_on_every_peer(
    cluster: &mut Cluster,
    endpoints: &[String],
    keys: &[Key],
) -> Key {
    cluster.hosts[1].kill_agent();
    std::fs::remove_file(key_file(&cluster.hosts[1])).unwrap();
    start(&mut cluster.hosts[1], endpoints);
    let rotated = published_key(cluster, &cluster.hosts[1]).unwrap();
    assert_ne!(rotated, keys[1], "a new key after rotation");
    assert_eq!(device(&cluster.hosts[1]).public_key, Some(rotated));
    wait_device_peers(cluster, 0, &[1, 2], &[rotated, keys[2]]);
    wait_device_peers(cluster, 2, &[0, 1], &[keys[0], rotated]);
    for i in [0, 2] {
        assert!(
            device(&cluster.hosts[i]).peers.iter().all(|p| p.public_key != keys[1]),
            "old key kept on {i}"
        );
    }
    all_pairs_talk(cluster, &[0, 1, 2]);
    rotated
}

/// Removal: host 2's agent killed; its lease runs out, its record goes, and the others'
/// devices drop its peer (and their routes to its subnet). `keys` are hosts 0's and 1's.
fn a_removed_host_leaves_the_peers_devices_and_routes(cluster: &mut Cluster, keys: &[Key; 2]) {
    let gone: [ipnet::IpNet; 2] =
        [cluster.hosts[2].subnet().unwrap().into(), cluster.hosts[2].subnet6().unwrap().into()];
    cluster.hosts[2].kill_agent();
    wait_device_peers(cluster, 0, &[1], &[keys[1]]);
    wait_device_peers(cluster, 1, &[0], &[keys[0]]);
    // The agent drops the device's peer before its routes: wait for the routes too.
    for i in [0, 1] {
        let routed = || {
            [cni_net::netlink::IpFamily::V4, cni_net::netlink::IpFamily::V6]
                .into_iter()
                .flat_map(|family| cluster.hosts[i].netlink().routes(family, None).unwrap())
                .filter(|r| gone.contains(&r.destination))
                .collect::<Vec<_>>()
        };
        let dropped = wait_for(CONVERGE, || routed().is_empty().then_some(()));
        assert!(dropped.is_some(), "host {i} still routes {:?}\n{}", routed(), cluster.logs());
    }
    all_pairs_talk(cluster, &[0, 1]);
}
