//! Kubernetes' path (issue 24): containerd's CRI plugin driven over the CRI gRPC API as
//! kubelet drives it — RunPodSandbox / PodSandboxStatus / StopPodSandbox /
//! RemovePodSandbox. Every scenario runs twice, on our plugins (`ours`) and on the Go
//! reference plugins in `/usr/lib/cni` (`go`), so that a failure on ours is ours. containerd
//! runs its built-in loopback network and the test's conflist (bridge + host-local, portmap,
//! firewall, tuning, bandwidth) with what the CRI path sends: Go-cased capability
//! arguments, K8S_POD_* args, DEL rounds without a netns on the second stop. Needs root,
//! containerd, runc, busybox-static; fails loudly without them.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_e2e::containerd::Containerd;
use cni_e2e::image::{IMAGE_NAME, INDEX_BODY};
use cni_e2e::oracle::{host_local_allocations, HostSnapshot};
use cni_e2e::plugin_dir::PluginDir;
use cni_net::NetNs;
use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, DnsConfig, ImageSpec, NamespaceMode,
    NamespaceOption, NetworkConfig, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusRequest,
    PortMapping, Protocol, RemovePodSandboxRequest, RunPodSandboxRequest, RuntimeConfig,
    StartContainerRequest, StatusRequest, StopPodSandboxRequest, UpdateRuntimeConfigRequest,
};
use serde_json::{json, Value};
use tonic::transport::{Channel, Endpoint, Uri};

const NETWORK: &str = "cne-cri";
const SUBNET_PREFIX: &str = "10.89.78.";
const GATEWAY: &str = "10.89.78.1";
const SUBNET6_PREFIX: &str = "fd89:78::";
const BRIDGE: &str = "cne-cri0";
const HOST_PORT: u16 = 18080;
/// Every plugin the conflist names, and loopback (containerd's own network).
const CHAIN: &[&str] = &["bridge", "host-local", "portmap", "firewall", "tuning", "bandwidth", "loopback"];

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

fn conflist() -> String {
    conflist_with_tuning(json!({"type": "tuning"}))
}

/// The conflist with `tuning` as its tuning plugin.
fn conflist_with_tuning(tuning: Value) -> String {
    conflist_with(tuning, false)
}

/// The conflist with an IPv6 range (and default route) after the IPv4 one.
fn dual_stack_conflist() -> String {
    conflist_with(json!({"type": "tuning"}), true)
}

fn conflist_with(tuning: Value, dual_stack: bool) -> String {
    let mut ranges = vec![json!([{"subnet": format!("{SUBNET_PREFIX}0/24")}])];
    let mut routes = vec![json!({"dst": "0.0.0.0/0"})];
    if dual_stack {
        ranges.push(json!([{"subnet": format!("{SUBNET6_PREFIX}/64")}]));
        routes.push(json!({"dst": "::/0"}));
    }
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": ranges, "routes": routes}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"},
            tuning,
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

/// A CRI client on containerd's socket, blocking (a current-thread runtime of its own).
struct Cri {
    runtime: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
}

impl Cri {
    fn connect(containerd: &Containerd) -> Cri {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let socket = containerd.socket();
        let channel = runtime
            .block_on(Endpoint::try_from("http://[::]:50051").unwrap().connect_with_connector(
                tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
                    }
                }),
            ))
            .expect("connect to containerd's CRI socket");
        let mut cri = Cri { runtime, client: RuntimeServiceClient::new(channel) };
        cri.wait_until_ready();
        cri
    }

    /// Waits until the CRI plugin answers `Status` (it serves a while after containerd's
    /// own API does, after a restart too), as kubelet waits for its runtime.
    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.runtime.block_on(self.client.status(StatusRequest { verbose: false }));
            match answer {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!("the CRI plugin never became ready: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn run_pod(&mut self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let response = self.runtime.block_on(self.client.run_pod_sandbox(request))?;
        Ok(response.into_inner().pod_sandbox_id)
    }

    /// The pod's IPs as containerd reports them, and its verbose info.
    fn status(&mut self, id: &str) -> (String, Vec<String>, Value) {
        let request = PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: true };
        let response = self.runtime.block_on(self.client.pod_sandbox_status(request)).unwrap().into_inner();
        let network = response.status.and_then(|s| s.network).unwrap_or_default();
        let info =
            response.info.get("info").map(|text| serde_json::from_str(text).unwrap()).unwrap_or(Value::Null);
        (network.ip, network.additional_ips.into_iter().map(|ip| ip.ip).collect(), info)
    }

    /// Runs `configs` as concurrent RunPodSandbox calls (kubelet's pod workers do); returns
    /// the sandbox IDs in order.
    fn run_pods(&mut self, configs: Vec<PodSandboxConfig>) -> Vec<String> {
        let calls = configs.into_iter().map(|config| {
            let mut client = self.client.clone();
            let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
            async move { client.run_pod_sandbox(request).await.map(|r| r.into_inner().pod_sandbox_id) }
        });
        let tasks: Vec<_> = calls.map(|call| self.runtime.spawn(call)).collect();
        tasks.into_iter().map(|task| self.runtime.block_on(task).unwrap().expect("RunPodSandbox")).collect()
    }

    /// Whether the runtime reports its `NetworkReady` condition true.
    fn network_ready(&mut self) -> bool {
        let status = self.runtime.block_on(self.client.status(StatusRequest { verbose: false })).unwrap();
        let conditions = status.into_inner().status.map(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| c.r#type == "NetworkReady" && c.status)
    }

    /// What kubelet sends once the node has its pod CIDR.
    fn update_pod_cidr(&mut self, cidr: &str) {
        let request = UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig { pod_cidr: cidr.to_string() }),
            }),
        };
        self.runtime.block_on(self.client.update_runtime_config(request)).expect("UpdateRuntimeConfig");
    }

    /// Creates and starts a container running `command` in pod `sandbox_id`.
    fn start_container(
        &mut self,
        sandbox_id: &str,
        sandbox_config: PodSandboxConfig,
        name: &str,
        command: &[&str],
    ) {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata { name: name.to_string(), attempt: 0 }),
            image: Some(ImageSpec { image: IMAGE_NAME.to_string(), ..Default::default() }),
            command: command.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let created = self.runtime.block_on(self.client.create_container(request)).expect("CreateContainer");
        let container_id = created.into_inner().container_id;
        let request = StartContainerRequest { container_id };
        self.runtime.block_on(self.client.start_container(request)).expect("StartContainer");
    }

    fn stop(&mut self, id: &str) {
        let request = StopPodSandboxRequest { pod_sandbox_id: id.to_string() };
        self.runtime.block_on(self.client.stop_pod_sandbox(request)).expect("StopPodSandbox");
    }

    fn remove(&mut self, id: &str) {
        let request = RemovePodSandboxRequest { pod_sandbox_id: id.to_string() };
        self.runtime.block_on(self.client.remove_pod_sandbox(request)).expect("RemovePodSandbox");
    }
}

/// A pod as kubelet describes it: own network namespace, DNS, a hostPort, bandwidth.
fn pod(name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "cne".to_string(),
            attempt: 0,
        }),
        hostname: name.to_string(),
        dns_config: Some(DnsConfig {
            servers: vec!["10.89.0.53".into()],
            searches: vec!["cne.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        port_mappings: vec![PortMapping {
            protocol: Protocol::Tcp as i32,
            container_port: 80,
            host_port: HOST_PORT.into(),
            host_ip: String::new(),
        }],
        annotations: HashMap::from([
            ("kubernetes.io/ingress-bandwidth".to_string(), "1M".to_string()),
            ("kubernetes.io/egress-bandwidth".to_string(), "2M".to_string()),
        ]),
        linux: Some(k8s_cri::v1::LinuxPodSandboxConfig {
            security_context: Some(k8s_cri::v1::LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Pod as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod with nothing but its own network namespace.
fn plain_pod(name: &str) -> PodSandboxConfig {
    PodSandboxConfig { port_mappings: Vec::new(), annotations: HashMap::new(), ..pod(name) }
}

/// A pod in the host's network namespace (`hostNetwork: true`).
fn host_network(name: &str) -> PodSandboxConfig {
    // No hostname either: the pod shares the host's UTS namespace (kubelet sends none).
    let mut config = PodSandboxConfig { hostname: String::new(), ..plain_pod(name) };
    let options = config.linux.as_mut().and_then(|l| l.security_context.as_mut()).unwrap();
    options.namespace_options.as_mut().unwrap().network = NamespaceMode::Node as i32;
    config
}

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
