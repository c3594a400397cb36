//! Kubernetes' path: containerd's CRI plugin driven over the CRI gRPC API as
//! kubelet drives it — RunPodSandbox / PodSandboxStatus / StopPodSandbox /
//! RemovePodSandbox. Every scenario runs twice, on our plugins (`ours`) and on the Go
//! reference plugins in `/usr/lib/cni` (`go`), so that a failure on ours is ours. containerd
//! runs its built-in loopback network and the test's conflist (bridge + host-local, portmap,
//! firewall, tuning, bandwidth) with what the CRI path sends: Go-cased capability
//! arguments, K8S_POD_* args, DEL rounds without a netns on the second stop. Needs root,
//! containerd, runc, busybox-static; fails loudly without them.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_e2e::containerd::Containerd;
use cni_e2e::cri::{
    conflist, conflist_with_tuning, dual_stack_conflist, host_network, plain_pod, pod, Cri, BRIDGE, CHAIN,
    GATEWAY, HOST_PORT, NETWORK, SUBNET6_PREFIX, SUBNET_PREFIX,
};
use cni_e2e::image::INDEX_BODY;
use cni_e2e::oracle::{host_local_allocations, HostSnapshot};
use cni_e2e::plugin_dir::PluginDir;
use cni_net::NetNs;
use serde_json::{json, Value};

/// The plugin sets every scenario runs on.
fn ours() -> PluginDir {
    PluginDir::install_ours()
}

fn go() -> PluginDir {
    PluginDir::at(std::path::Path::new("/usr/lib/cni"), "go")
}

/// A `#[test]` per plugin set for each scenario, in a module named after it.
macro_rules! on_both_plugin_sets {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn ours() {
                super::$scenario(super::ours());
            }
            #[test]
            fn go() {
                super::$scenario(super::go());
            }
        }
    )*};
}

on_both_plugin_sets!(
    pod_lifecycle,
    failed_add_is_cleaned_up,
    host_network_pod,
    twenty_pods_at_once,
    containerd_restart,
    dual_stack,
    pod_cidr_from_update_runtime_config,
);

/// `GET /` over HTTP/1.0 from inside `ns`; the whole answer. A server that is still
/// starting is retried (refused connections) for a few seconds.
fn http_get(ns: &NetNs, addr: SocketAddr) -> std::io::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let attempt = ns.run(|| -> std::io::Result<String> {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer)
        });
        match attempt.expect("enter the host's netns") {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            answer => return answer,
        }
    }
}

/// Links of the host namespace other than loopback and the network's bridge.
fn pod_links(snapshot: &HostSnapshot) -> BTreeSet<String> {
    snapshot.links.iter().filter(|l| *l != "lo" && *l != BRIDGE).cloned().collect()
}

/// The tbf rate (bytes/s) `tc` shows on each host link.
fn tbf_rates(containerd: &Containerd) -> Vec<Value> {
    let out = containerd.host().netns().command("tc").args(["-j", "qdisc", "show"]).output().unwrap();
    let qdiscs: Value = serde_json::from_slice(&out.stdout).unwrap();
    qdiscs
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["kind"] == "tbf")
        .map(|q| q["options"]["rate"].clone())
        .collect()
}

fn cni_cache_entries(containerd: &Containerd) -> Vec<PathBuf> {
    let dir = containerd.host().private_path("/var/lib/cni/results");
    std::fs::read_dir(dir).map(|entries| entries.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

/// containerd on `plugins` with `conflist`, a CRI client, and the host as a first pod's full
/// round leaves it (the bridge and per-network chains stay between pods): the baseline
/// every later pod must return the host to.
fn rig(plugins: PluginDir, conflist: &str) -> (Containerd, Cri, HostSnapshot) {
    let containerd = Containerd::start_cri(plugins, Some(conflist), CHAIN);
    let mut cri = Cri::connect(&containerd);
    let label = containerd.plugins_label().to_string();
    let warm_up =
        cri.run_pod(pod("cne-warm")).unwrap_or_else(|e| panic!("[{label}] {e}\n{}", containerd.log()));
    cri.stop(&warm_up);
    cri.remove(&warm_up);
    let baseline = HostSnapshot::take(containerd.host());
    (containerd, cri, baseline)
}

/// Nothing of any pod is left: the host as `baseline`, no pod links, reservations, cached
/// results or qdiscs.
fn assert_nothing_left(containerd: &Containerd, baseline: &HostSnapshot) {
    let label = containerd.plugins_label();
    let after = HostSnapshot::take(containerd.host());
    assert_eq!(&after, baseline, "[{label}] left behind:\n{}", after.diff(baseline));
    assert!(pod_links(&after).is_empty(), "[{label}] {:?}", pod_links(&after));
    let left = host_local_allocations(&containerd.host_local_data_dir(), NETWORK);
    assert!(left.is_empty(), "[{label}] reservations left: {left:?}");
    let cached = cni_cache_entries(containerd);
    assert!(cached.is_empty(), "[{label}] cache left: {cached:?}");
    assert!(tbf_rates(containerd).is_empty(), "[{label}] qdiscs left");
}

/// critest's network checks and more on one pod: pod IP, DNS, hostname, podIP:80 and the
/// hostPort, bandwidth annotations; stop twice then remove leaves nothing.
fn pod_lifecycle(plugins: PluginDir) {
    let (containerd, mut cri, baseline) = rig(plugins, &conflist());
    let label = containerd.plugins_label().to_string();
    let data_dir = containerd.host_local_data_dir();

    let started = Instant::now();
    let id = cri.run_pod(pod("cne-web")).unwrap_or_else(|e| panic!("[{label}] {e}\n{}", containerd.log()));
    eprintln!("cni-e2e [{label}]: RunPodSandbox took {:?}", started.elapsed());

    // The IP containerd reports is the one the chain's result gave eth0, and reserved.
    let (ip, additional, info) = cri.status(&id);
    assert!(ip.starts_with(SUBNET_PREFIX), "[{label}] pod IP {ip:?}");
    assert!(additional.is_empty(), "{additional:?}");
    let result = &info["cniResult"]["Interfaces"]["eth0"]["IPConfigs"];
    assert_eq!(result[0]["IP"], ip, "[{label}] cniResult: {}", info["cniResult"]);
    assert!(host_local_allocations(&data_dir, NETWORK).contains(&ip), "{ip} not reserved");

    // What the plugins were sent, as libcni cached it: Go-cased capability arguments and
    // kubelet's CNI_ARGS (the case our plugins must take as the Go ones do).
    let cached: Value =
        std::fs::read(containerd.host().private_path(&format!("/var/lib/cni/results/{NETWORK}-{id}-eth0")))
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
            .expect("libcni's cached result for eth0");
    let sent = &cached["capabilityArgs"];
    assert_eq!(sent["portMappings"][0]["HostPort"], HOST_PORT, "{sent}");
    assert_eq!(sent["bandwidth"]["IngressRate"], 1_000_000, "{sent}");
    let args = cached["cniArgs"].to_string();
    assert!(args.contains("K8S_POD_NAME") && args.contains("IgnoreUnknown"), "{args}");

    // DNS and hostname as the pod asked.
    let sandbox_dir = containerd.cri_sandbox_dir(&id);
    let resolv = std::fs::read_to_string(sandbox_dir.join("resolv.conf")).unwrap();
    assert!(
        resolv.contains("nameserver 10.89.0.53") && resolv.contains("search cne.svc.cluster.local"),
        "{resolv}"
    );
    assert_eq!(std::fs::read_to_string(sandbox_dir.join("hostname")).unwrap().trim(), "cne-web");

    // critest's check: an HTTP server in a container of the pod (busybox httpd), reached
    // from the host at podIP:80 and through the hostPort on the host's address and on
    // 127.0.0.1.
    cri.start_container(&id, pod("cne-web"), "web", &["httpd", "-f", "-p", "80", "-h", "/var/www"]);
    let host_ns = containerd.host().netns().netns();
    for target in [format!("{ip}:80"), format!("{GATEWAY}:{HOST_PORT}"), format!("127.0.0.1:{HOST_PORT}")] {
        let page =
            http_get(host_ns, target.parse().unwrap()).unwrap_or_else(|e| panic!("[{label}] {target}: {e}"));
        assert!(page.ends_with(INDEX_BODY), "[{label}] {target} answered {page:?}");
    }

    // Bandwidth annotations became the bandwidth capability: 1M ingress = 125000 bytes/s
    // on the host veth, 2M egress = 250000 on the IFB.
    let rates = tbf_rates(&containerd);
    assert!(
        rates.contains(&json!(125_000)) && rates.contains(&json!(250_000)),
        "[{label}] tbf rates {rates:?}"
    );

    // Stop twice (the second round of DEL has no netns and no cached prevResult), remove.
    cri.stop(&id);
    cri.stop(&id);
    cri.remove(&id);
    assert_nothing_left(&containerd, &baseline);
}

/// An ADD that fails late in the chain (tuning, after bridge, host-local, portmap and
/// firewall did their work): RunPodSandbox fails and containerd's DEL of every network
/// takes all of it away.
fn failed_add_is_cleaned_up(plugins: PluginDir) {
    let failing = conflist_with_tuning(
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.cne_no_such_key": "1"}}),
    );
    let containerd = Containerd::start_cri(plugins, Some(&failing), CHAIN);
    let label = containerd.plugins_label().to_string();
    let mut cri = Cri::connect(&containerd);
    let before = HostSnapshot::take(containerd.host());
    let err = cri.run_pod(pod("cne-fail")).expect_err("RunPodSandbox succeeded with a failing chain");
    assert!(err.message().contains("cne_no_such_key"), "[{label}] {err:?}");
    let after = HostSnapshot::take(containerd.host());
    assert!(pod_links(&after).is_empty(), "[{label}] links left: {:?}", pod_links(&after));
    let pod_ip = format!("{SUBNET_PREFIX}2");
    if label == "go" {
        // The reference's firewall DEL finds the pod's addresses only in a prevResult, and
        // a failed ADD never cached one: its accept rules for the address stay (ours are
        // keyed by the attachment and go). Everything else must be gone.
        let leaked: Vec<&str> = after.iptables.lines().filter(|l| l.contains(&pod_ip)).collect();
        assert!(leaked.iter().all(|l| l.starts_with("-A CNI-FORWARD")), "[go] rules left: {leaked:?}");
        eprintln!("cni-e2e [go]: a failed ADD leaves the firewall's rules: {leaked:?}");
    } else {
        assert!(!after.rules_mention(&pod_ip), "[{label}] rules left:\n{}", after.diff(&before));
    }
    assert!(!after.rules_mention(&HOST_PORT.to_string()), "[{label}] hostPort rules left");
    let left = host_local_allocations(&containerd.host_local_data_dir(), NETWORK);
    assert!(left.is_empty(), "[{label}] reservations left: {left:?}");
    assert!(cni_cache_entries(&containerd).is_empty(), "[{label}] cache left");
    assert!(tbf_rates(&containerd).is_empty(), "[{label}] qdiscs left");
}

/// A hostNetwork pod gets no CNI call at all.
fn host_network_pod(plugins: PluginDir) {
    let (containerd, mut cri, baseline) = rig(plugins, &conflist());
    let id = cri.run_pod(host_network("cne-hostnet")).unwrap();
    assert!(host_local_allocations(&containerd.host_local_data_dir(), NETWORK).is_empty());
    assert!(cni_cache_entries(&containerd).is_empty(), "a hostNetwork pod was networked");
    assert_eq!(HostSnapshot::take(containerd.host()), baseline);
    cri.stop(&id);
    cri.remove(&id);
    assert_nothing_left(&containerd, &baseline);
}

/// 20 RunPodSandbox calls at once: 20 distinct addresses, each reserved; all gone after.
fn twenty_pods_at_once(plugins: PluginDir) {
    let (containerd, mut cri, baseline) = rig(plugins, &conflist());
    let label = containerd.plugins_label().to_string();
    let started = Instant::now();
    let ids = cri.run_pods((0..20).map(|i| plain_pod(&format!("cne-many-{i}"))).collect());
    eprintln!("cni-e2e [{label}]: 20 concurrent RunPodSandbox took {:?}", started.elapsed());
    let ips: BTreeSet<String> = ids.iter().map(|id| cri.status(id).0).collect();
    assert_eq!(ips.len(), 20, "[{label}] addresses not distinct: {ips:?}");
    assert_eq!(host_local_allocations(&containerd.host_local_data_dir(), NETWORK), ips);
    for id in &ids {
        cri.stop(id);
        cri.remove(id);
    }
    assert_nothing_left(&containerd, &baseline);
}

/// containerd killed (SIGKILL) and restarted with pods running; stopping them afterwards
/// still tears everything down (from libcni's cache on disk).
fn containerd_restart(plugins: PluginDir) {
    let (mut containerd, mut cri, baseline) = rig(plugins, &conflist());
    let ids = vec![cri.run_pod(pod("cne-survivor")).unwrap(), cri.run_pod(plain_pod("cne-other")).unwrap()];
    containerd.kill_and_restart();
    let mut cri = Cri::connect(&containerd);
    for id in &ids {
        cri.stop(id);
        cri.remove(id);
    }
    assert_nothing_left(&containerd, &baseline);
}

/// A dual-stack network: the pod IP is the IPv4 address, the IPv6 one is in
/// `additional_ips`; both reserved, both released.
fn dual_stack(plugins: PluginDir) {
    let (containerd, mut cri, baseline) = rig(plugins, &dual_stack_conflist());
    let label = containerd.plugins_label().to_string();
    let id = cri.run_pod(plain_pod("cne-dual")).unwrap();
    let (ip, additional, _) = cri.status(&id);
    assert!(ip.starts_with(SUBNET_PREFIX), "[{label}] pod IP {ip:?}");
    assert_eq!(additional.len(), 1, "[{label}] {additional:?}");
    assert!(additional[0].starts_with(SUBNET6_PREFIX), "[{label}] {additional:?}");
    let reserved = host_local_allocations(&containerd.host_local_data_dir(), NETWORK);
    assert_eq!(reserved, BTreeSet::from([ip, additional[0].clone()]), "[{label}]");
    cri.stop(&id);
    cri.stop(&id);
    cri.remove(&id);
    assert_nothing_left(&containerd, &baseline);
}

/// No conflist until the node has a pod CIDR: NetworkReady is false; kubelet's
/// `UpdateRuntimeConfig(pod_cidr)` makes containerd write the conflist from its template,
/// NetworkReady turns true and a pod gets an address in that CIDR.
fn pod_cidr_from_update_runtime_config(plugins: PluginDir) {
    let containerd = Containerd::start_cri(plugins, None, CHAIN);
    let label = containerd.plugins_label().to_string();
    let template = conflist().replace(&format!("{SUBNET_PREFIX}0/24"), "{{.PodCIDR}}");
    containerd.write_conf_template(&template);
    let mut cri = Cri::connect(&containerd);
    assert!(!cri.network_ready(), "[{label}] NetworkReady without a network config");
    cri.update_pod_cidr("10.89.79.0/24");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cri.network_ready() {
        assert!(Instant::now() < deadline, "[{label}] NetworkReady never turned true");
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = cri.run_pod(plain_pod("cne-cidr")).unwrap_or_else(|e| panic!("[{label}] {e}"));
    let (ip, _, _) = cri.status(&id);
    assert!(ip.starts_with("10.89.79."), "[{label}] pod IP {ip:?} outside the pod CIDR");
    cri.stop(&id);
    cri.remove(&id);
    assert!(host_local_allocations(&containerd.host_local_data_dir(), NETWORK).is_empty());
}
