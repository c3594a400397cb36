//! Kubernetes' path (issue 24): containerd's CRI plugin driven over the CRI gRPC API as
//! kubelet drives it — RunPodSandbox / PodSandboxStatus / StopPodSandbox /
//! RemovePodSandbox — on the plugin directory under test (ours by default,
//! `CNI_E2E_PLUGIN_DIR=/usr/lib/cni` for the Go reference). containerd runs its built-in
//! loopback network and the test's conflist (bridge + host-local, portmap, firewall, tuning,
//! bandwidth) with what the CRI path sends: Go-cased capability arguments, K8S_POD_* args,
//! DEL rounds without a netns on the second stop. Needs root, containerd, runc,
//! busybox-static; fails loudly without them.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_e2e::containerd::Containerd;
use cni_e2e::oracle::{host_local_allocations, HostSnapshot};
use cni_net::NetNs;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    DnsConfig, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusRequest,
    PortMapping, Protocol, RemovePodSandboxRequest, RunPodSandboxRequest, StopPodSandboxRequest,
};
use serde_json::{json, Value};
use tonic::transport::{Channel, Endpoint, Uri};

const NETWORK: &str = "cne-cri";
const SUBNET_PREFIX: &str = "10.89.78.";
const GATEWAY: &str = "10.89.78.1";
const BRIDGE: &str = "cne-cri0";
const HOST_PORT: u16 = 18080;
/// Every plugin the conflist names, and loopback (containerd's own network).
const CHAIN: &[&str] = &["bridge", "host-local", "portmap", "firewall", "tuning", "bandwidth", "loopback"];

fn conflist() -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("{SUBNET_PREFIX}0/24")}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"},
            {"type": "tuning"},
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
        Cri { runtime, client: RuntimeServiceClient::new(channel) }
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

/// The sandbox's network namespace, through its pause process (the verbose status's pid).
fn pod_netns(info: &Value) -> NetNs {
    let pid = info["pid"].as_u64().unwrap_or_else(|| panic!("no sandbox pid in {info}"));
    NetNs::open(format!("/proc/{pid}/ns/net")).expect("open the pod's netns")
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

#[test]
fn cri_pod_lifecycle_networks_the_pod_and_leaves_nothing() {
    let containerd = Containerd::start_cri(&conflist(), CHAIN);
    let label = containerd.plugins_label().to_string();
    let mut cri = Cri::connect(&containerd);
    let data_dir = containerd.host_local_data_dir();

    // A first pod's full round makes what the network keeps between pods (the bridge,
    // per-network chains): the baseline every later pod must return to.
    let warm_up =
        cri.run_pod(pod("cne-warm")).unwrap_or_else(|e| panic!("[{label}] {e}\n{}", containerd.log()));
    cri.stop(&warm_up);
    cri.remove(&warm_up);
    let baseline = HostSnapshot::take(containerd.host());

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

    // DNS and hostname as the pod asked.
    let sandbox_dir = containerd.cri_sandbox_dir(&id);
    let resolv = std::fs::read_to_string(sandbox_dir.join("resolv.conf")).unwrap();
    assert!(
        resolv.contains("nameserver 10.89.0.53") && resolv.contains("search cne.svc.cluster.local"),
        "{resolv}"
    );
    assert_eq!(std::fs::read_to_string(sandbox_dir.join("hostname")).unwrap().trim(), "cne-web");

    // Traffic: a server on podIP:80, reached directly and through the hostPort (on the
    // host's address and on 127.0.0.1) from the host.
    let pod_ns = pod_netns(&info);
    let server = tcp_echo_server(&pod_ns, format!("{ip}:80").parse().unwrap()).unwrap();
    let host_ns = containerd.host().netns().netns();
    for target in [format!("{ip}:80"), format!("{GATEWAY}:{HOST_PORT}"), format!("127.0.0.1:{HOST_PORT}")] {
        let addr: SocketAddr = target.parse().unwrap();
        tcp_echo(host_ns, addr, b"kubelet's path", Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("[{label}] {target}: {e}"));
    }
    drop(server);

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
    let after = HostSnapshot::take(containerd.host());
    assert_eq!(after, baseline, "[{label}] left behind:\n{}", after.diff(&baseline));
    assert!(pod_links(&after).is_empty(), "{:?}", pod_links(&after));
    let left = host_local_allocations(&data_dir, NETWORK);
    assert!(left.is_empty(), "[{label}] reservations left: {left:?}");
    assert!(cni_cache_entries(&containerd).is_empty(), "cache left: {:?}", cni_cache_entries(&containerd));
    assert!(tbf_rates(&containerd).is_empty());
}
