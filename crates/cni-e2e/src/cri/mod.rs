//! Kubernetes' path: a CRI client that drives containerd's CRI plugin as kubelet does, and
//! the pods and network it is used with (the CRI suite in `tests/it/cri.rs`, cni-bench's cri
//! workload).
//!
//! The client speaks the CRI gRPC API (`runtime.v1`) over containerd's socket, blocking on
//! a current-thread runtime of its own: tonic's generic gRPC client with the few messages
//! it sends and reads written out by hand in [`api`], so that nothing is generated at
//! build time (no build script, no `protoc`). The network is a typical Kubernetes bridge
//! network: bridge + host-local, portmap and bandwidth (with their capabilities), firewall,
//! tuning.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use api::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, CreateContainerResponse, DnsConfig,
    ImageSpec, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    NetworkConfig, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusRequest, PodSandboxStatusResponse,
    PortMapping, Protocol, RemovePodSandboxRequest, RemovePodSandboxResponse, RunPodSandboxRequest,
    RunPodSandboxResponse, RuntimeConfig, StartContainerRequest, StartContainerResponse, StatusRequest,
    StatusResponse, StopPodSandboxRequest, StopPodSandboxResponse, UpdateRuntimeConfigRequest,
    UpdateRuntimeConfigResponse,
};
use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_prost::ProstCodec;

use crate::containerd::Containerd;
use crate::image::IMAGE_NAME;

/// The CRI messages, for callers that build their own.
pub mod api;

/// The network's name, subnets (as address prefixes), gateway and bridge.
pub const NETWORK: &str = "cne-cri";
pub const SUBNET_PREFIX: &str = "10.89.78.";
pub const GATEWAY: &str = "10.89.78.1";
pub const SUBNET6_PREFIX: &str = "fd89:78::";
pub const BRIDGE: &str = "cne-cri0";
/// The hostPort [`pod`] maps to its port 80.
pub const HOST_PORT: u16 = 18080;
/// Every plugin the conflist names, and loopback (containerd's own network).
pub const CHAIN: &[&str] =
    &["bridge", "host-local", "portmap", "firewall", "tuning", "bandwidth", "loopback"];

/// The network's conflist.
pub fn conflist() -> String {
    conflist_with_tuning(json!({"type": "tuning"}))
}

/// The conflist with `tuning` as its tuning plugin.
pub fn conflist_with_tuning(tuning: Value) -> String {
    conflist_with(tuning, false)
}

/// The conflist with an IPv6 range (and default route) after the IPv4 one.
pub fn dual_stack_conflist() -> String {
    conflist_with(json!({"type": "tuning"}), true)
}

/// The conflist with `tuning`, and an IPv6 range after the IPv4 one when `dual_stack`.
pub fn conflist_with(tuning: Value, dual_stack: bool) -> String {
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

/// The `runtime.v1.RuntimeService` methods called here, as gRPC paths.
const RUN_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RunPodSandbox";
const STOP_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/StopPodSandbox";
const REMOVE_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RemovePodSandbox";
const POD_SANDBOX_STATUS: &str = "/runtime.v1.RuntimeService/PodSandboxStatus";
const CREATE_CONTAINER: &str = "/runtime.v1.RuntimeService/CreateContainer";
const START_CONTAINER: &str = "/runtime.v1.RuntimeService/StartContainer";
const UPDATE_RUNTIME_CONFIG: &str = "/runtime.v1.RuntimeService/UpdateRuntimeConfig";
const STATUS: &str = "/runtime.v1.RuntimeService/Status";

/// A unary call of `method` (one of the paths above) with `request`, answered by a `Resp`.
/// Takes its own client: clones of one share the connection, so calls can run concurrently.
async fn call<Req, Resp>(
    mut client: Grpc<Channel>,
    method: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    client.ready().await.map_err(|e| tonic::Status::unknown(format!("the CRI channel is not ready: {e}")))?;
    let path = PathAndQuery::from_static(method);
    let response =
        client.unary(tonic::Request::new(request), path, ProstCodec::<Req, Resp>::default()).await?;
    Ok(response.into_inner())
}

/// A CRI client on containerd's socket, blocking (a current-thread runtime of its own).
pub struct Cri {
    runtime: tokio::runtime::Runtime,
    client: Grpc<Channel>,
}

impl Cri {
    pub fn connect(containerd: &Containerd) -> Cri {
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
        let mut cri = Cri { runtime, client: Grpc::new(channel) };
        cri.wait_until_ready();
        cri
    }

    /// A unary call of `method`, blocking until its answer.
    fn call<Req, Resp>(&mut self, method: &'static str, request: Req) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.runtime.block_on(call(self.client.clone(), method, request))
    }

    /// Waits until the CRI plugin answers `Status` (it serves a while after containerd's
    /// own API does, after a restart too), as kubelet waits for its runtime.
    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer: Result<StatusResponse, _> = self.call(STATUS, StatusRequest { verbose: false });
            match answer {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!("the CRI plugin never became ready: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    pub fn run_pod(&mut self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let response: RunPodSandboxResponse = self.call(RUN_POD_SANDBOX, request)?;
        Ok(response.pod_sandbox_id)
    }

    /// The pod's IPs as containerd reports them, and its verbose info.
    pub fn status(&mut self, id: &str) -> (String, Vec<String>, Value) {
        let request = PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: true };
        let response: PodSandboxStatusResponse = self.call(POD_SANDBOX_STATUS, request).unwrap();
        let network = response.status.and_then(|s| s.network).unwrap_or_default();
        let info =
            response.info.get("info").map(|text| serde_json::from_str(text).unwrap()).unwrap_or(Value::Null);
        (network.ip, network.additional_ips.into_iter().map(|ip| ip.ip).collect(), info)
    }

    /// Runs `configs` as concurrent RunPodSandbox calls (kubelet's pod workers do); returns
    /// the sandbox IDs in order.
    pub fn run_pods(&mut self, configs: Vec<PodSandboxConfig>) -> Vec<String> {
        let calls = configs.into_iter().map(|config| {
            let request = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
            let response = call::<_, RunPodSandboxResponse>(self.client.clone(), RUN_POD_SANDBOX, request);
            async move { response.await.map(|r| r.pod_sandbox_id) }
        });
        let tasks: Vec<_> = calls.map(|call| self.runtime.spawn(call)).collect();
        tasks.into_iter().map(|task| self.runtime.block_on(task).unwrap().expect("RunPodSandbox")).collect()
    }

    /// Whether the runtime reports its `NetworkReady` condition true.
    pub fn network_ready(&mut self) -> bool {
        let status: StatusResponse = self.call(STATUS, StatusRequest { verbose: false }).unwrap();
        let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
        conditions.iter().any(|c| c.r#type == "NetworkReady" && c.status)
    }

    /// What kubelet sends once the node has its pod CIDR.
    pub fn update_pod_cidr(&mut self, cidr: &str) {
        let request = UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig { pod_cidr: cidr.to_string() }),
            }),
        };
        let _: UpdateRuntimeConfigResponse =
            self.call(UPDATE_RUNTIME_CONFIG, request).expect("UpdateRuntimeConfig");
    }

    /// Creates and starts a container running `command` in pod `sandbox_id`.
    pub fn start_container(
        &mut self,
        sandbox_id: &str,
        sandbox_config: PodSandboxConfig,
        name: &str,
        command: &[&str],
    ) {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata { name: name.to_string(), attempt: 0 }),
            image: Some(ImageSpec { image: IMAGE_NAME.to_string() }),
            command: command.iter().map(|c| c.to_string()).collect(),
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let created: CreateContainerResponse = self.call(CREATE_CONTAINER, request).expect("CreateContainer");
        let request = StartContainerRequest { container_id: created.container_id };
        let _: StartContainerResponse = self.call(START_CONTAINER, request).expect("StartContainer");
    }

    pub fn stop(&mut self, id: &str) {
        let request = StopPodSandboxRequest { pod_sandbox_id: id.to_string() };
        let _: StopPodSandboxResponse = self.call(STOP_POD_SANDBOX, request).expect("StopPodSandbox");
    }

    pub fn remove(&mut self, id: &str) {
        let request = RemovePodSandboxRequest { pod_sandbox_id: id.to_string() };
        let _: RemovePodSandboxResponse = self.call(REMOVE_POD_SANDBOX, request).expect("RemovePodSandbox");
    }
}

/// A pod as kubelet describes it: own network namespace, DNS, a hostPort, bandwidth.
pub fn pod(name: &str) -> PodSandboxConfig {
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
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Pod as i32,
                    ipc: NamespaceMode::Pod as i32,
                }),
            }),
        }),
    }
}

/// A pod with nothing but its own network namespace.
pub fn plain_pod(name: &str) -> PodSandboxConfig {
    PodSandboxConfig { port_mappings: Vec::new(), annotations: HashMap::new(), ..pod(name) }
}

/// A pod in the host's network namespace (`hostNetwork: true`).
pub fn host_network(name: &str) -> PodSandboxConfig {
    // No hostname either: the pod shares the host's UTS namespace (kubelet sends none).
    let mut config = PodSandboxConfig { hostname: String::new(), ..plain_pod(name) };
    let options = config.linux.as_mut().and_then(|l| l.security_context.as_mut()).unwrap();
    options.namespace_options.as_mut().unwrap().network = NamespaceMode::Node as i32;
    config
}
