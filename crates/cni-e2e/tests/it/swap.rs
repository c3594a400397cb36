//! A node swapped from the Go reference plugins (`/usr/lib/cni`) to ours while its pods
//! run, as an operator upgrades the plugins on a live node: the engine keeps running and
//! finds the new binaries in its plugin directory on the next operation
//! ([`EngineHost::replace_plugin_dir`]). The pods the Go plugins started keep answering
//! on their hostPorts, ours stops them, a new pod of ours reuses a hostPort of a stopped
//! Go pod and gets its traffic, and once everything stopped the node is exactly as after
//! a warm-up pod of each plugin set: nothing of the reference's per-pod iptables state
//! (bridge's `CNI-<hash>` masquerade chain, portmap's `CNI-DN-<hash>` and its
//! `CNI-HOSTPORT-DNAT` entry, the firewall's `CNI-FORWARD` rules) is left. Once with
//! containerd's CRI plugin (kubelet's path), once with podman's CNI backend. Prefix `swp`.
//!
//! [`EngineHost::replace_plugin_dir`]: cni_e2e::engine_host::EngineHost::replace_plugin_dir

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cni_e2e::containerd::Containerd;
use cni_e2e::cri::{dual_stack_conflist, pod, Cri, CHAIN, GATEWAY, SUBNET6_PREFIX};
use cni_e2e::engine_host::EngineHost;
use cni_e2e::oracle::{iptables_save, HostSnapshot};
use cni_e2e::plugin_dir::PluginDir;
use cni_e2e::podman::{NetworkBackend, Podman, DEFAULT_NETWORK, PODMAN_CHAIN};
use cni_testkit::poll::{poll, EVENTUALLY};
use serde_json::Value;

/// How long a hostPort may take to answer once its container started.
const PATIENCE: Duration = Duration::from_secs(10);

fn ours() -> PluginDir {
    PluginDir::install_ours()
}

/// The Go plugins, outside the default directories an engine host hides (so that they
/// can be swapped in while engines run).
fn go() -> PluginDir {
    PluginDir::linked_from(std::path::Path::new("/usr/lib/cni"), "go")
}

/// What a pod's networking may leave on the node: iptables-save, the nftables ruleset and
/// the links ([`HostSnapshot`]), ip6tables-save, the host's addresses, and every entry
/// under `/var/lib/cni` by name (host-local's reservations, libcni's cached results,
/// plugins' saved state).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeState {
    host: HostSnapshot,
    ip6tables: String,
    addresses: BTreeSet<String>,
    cni_state: BTreeSet<String>,
}

impl NodeState {
    fn take(host: &EngineHost) -> NodeState {
        let addresses = host
            .netns()
            .ip_json(&["address", "show"])
            .as_array()
            .expect("ip -j address prints an array")
            .iter()
            .flat_map(|link| {
                let name = link["ifname"].as_str().unwrap_or_default().to_string();
                let addrs = link["addr_info"].as_array().cloned().unwrap_or_default();
                addrs.into_iter().map(move |a| format!("{name} {}/{}", text(&a["local"]), a["prefixlen"]))
            })
            .collect();
        let mut cni_state = BTreeSet::new();
        entries_under(&host.private_path("/var/lib/cni"), "", &mut cni_state);
        let ip6tables = iptables_save(host, "ip6tables-save");
        NodeState { host: HostSnapshot::take(host), ip6tables, addresses, cni_state }
    }

    /// How `later` differs from `self`, for failure messages.
    fn diff(&self, later: &NodeState) -> String {
        let mut out = self.host.diff(&later.host);
        let lines = |text: &str| text.lines().map(str::to_string).collect::<BTreeSet<String>>();
        let (ip6_before, ip6_after) = (lines(&self.ip6tables), lines(&later.ip6tables));
        for (what, before, after) in [
            ("ip6tables", &ip6_before, &ip6_after),
            ("address", &self.addresses, &later.addresses),
            ("/var/lib/cni", &self.cni_state, &later.cni_state),
        ] {
            before.difference(after).for_each(|e| out.push_str(&format!("{what} - {e}\n")));
            after.difference(before).for_each(|e| out.push_str(&format!("{what} + {e}\n")));
        }
        out
    }
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_string)
}

/// Every path under `dir`, relative, into `out`.
fn entries_under(dir: &std::path::Path, prefix: &str, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            entries_under(&entry.path(), &format!("{name}/"), out);
        }
        out.insert(name);
    }
}

/// The iptables (ip6tables for an IPv6 `ip`) rules that name `ip` as a whole address
/// (`-s/-d <ip>/32`, a DNAT to `<ip>:<port>`): the reference's per-pod state.
fn iptables_rules_of(state: &NodeState, ip: &str) -> Vec<String> {
    let (saved, whole, dnat) = if ip.contains(':') {
        (&state.ip6tables, format!("{ip}/128"), format!("[{ip}]:"))
    } else {
        (&state.host.iptables, format!("{ip}/32"), format!("{ip}:"))
    };
    saved.lines().filter(|l| l.contains(&whole) || l.contains(&dnat)).map(str::to_string).collect()
}

/// The rules of each of `ips`, for comparing before and after.
fn rules_of_all(state: &NodeState, ips: &[String]) -> Vec<String> {
    ips.iter().flat_map(|ip| iptables_rules_of(state, ip)).collect()
}

/// A container command serving `body` over HTTP on port 80 (busybox httpd), so that a
/// hostPort's answer names the pod behind it.
fn http_server(body: &str) -> Vec<String> {
    let script = format!("echo {body} > /tmp/index.html && exec httpd -f -p 80 -h /tmp");
    ["sh", "-c", &script].map(str::to_string).to_vec()
}

/// `GET /` through `host_port` on each of `addresses` (IPv6 ones in brackets) from the
/// engines' host must answer with `body`.
fn assert_answers(host: &EngineHost, addresses: &[String], host_port: u16, body: &str, when: &str) {
    for address in addresses {
        let target: SocketAddr = format!("{address}:{host_port}").parse().unwrap();
        let got = cni_e2e::net_text::http_get(host.netns(), target, PATIENCE)
            .unwrap_or_else(|e| panic!("{when}: {target}: {e}"));
        assert_eq!(got.trim(), body, "{when}: {target} answered for another pod");
    }
}

/// Waits until the node is as `baseline` (teardown may finish after the engine's command
/// returned); fails with the difference.
fn assert_back_to(host: &EngineHost, baseline: &NodeState, what: &str) {
    let mut last = None;
    let settled = poll(EVENTUALLY, || {
        let now = NodeState::take(host);
        let same = now == *baseline;
        last = Some(now);
        same.then_some(())
    });
    if settled.is_none() {
        let diff = baseline.diff(last.as_ref().expect("polled at least once"));
        panic!("{what}: the node differs from the baseline:\n{diff}");
    }
}

/// What the scenario needs of an engine.
trait Engine {
    fn host(&self) -> &EngineHost;
    /// Swaps the plugins under the running engine and its pods for `plugins`.
    fn swap_plugins(&mut self, plugins: PluginDir);
    /// Starts pod `name` with a container serving `name` over HTTP on port 80, published
    /// on `host_port`; its addresses, IPv4 first.
    fn start_web(&mut self, name: &str, host_port: u16) -> Vec<String>;
    /// Stops and removes pod `name` (the chain's DEL).
    fn remove(&mut self, name: &str);
}

/// The swap on `engine`, which runs ours with no pod yet. hostPorts are tried on each of
/// `gateways` (the bridge's addresses) and on 127.0.0.1; `ports` are two free host ports.
fn swap_scenario(engine: &mut impl Engine, gateways: &[&str], ports: [u16; 2]) {
    let everywhere: Vec<String> = gateways.iter().copied().chain(["127.0.0.1"]).map(str::to_string).collect();
    // Each plugin set keeps structures shared by its pods (the reference's CNI-HOSTPORT-*
    // and CNI-FORWARD chains, our nftables tables, the bridge): a warm-up pod on each
    // makes them, so that the end may differ from the baseline only by what a pod left.
    engine.start_web("swp-warm-ours", ports[0]);
    engine.remove("swp-warm-ours");
    engine.swap_plugins(go());
    engine.start_web("swp-warm-go", ports[0]);
    engine.remove("swp-warm-go");
    let baseline = NodeState::take(engine.host());

    // Two pods of the Go plugins with hostPorts; the reference's state for each of their
    // addresses is there: masquerade, DNAT, firewall.
    let a_ips = engine.start_web("swp-a", ports[0]);
    let b_ips = engine.start_web("swp-b", ports[1]);
    let with_go = NodeState::take(engine.host());
    for ip in a_ips.iter().chain(&b_ips) {
        let rules = iptables_rules_of(&with_go, ip);
        for kind in ["-A POSTROUTING", "-j DNAT", "-A CNI-FORWARD"] {
            assert!(rules.iter().any(|r| r.contains(kind)), "no reference rule {kind} for {ip}: {rules:?}");
        }
    }
    assert_answers(engine.host(), &everywhere, ports[0], "swp-a", "before the swap");

    // The swap, pods running: both hostPorts still answer.
    engine.swap_plugins(ours());
    assert_answers(engine.host(), &everywhere, ports[0], "swp-a", "after the swap");
    assert_answers(engine.host(), &everywhere, ports[1], "swp-b", "after the swap");

    // Ours stops a Go pod: none of its rules stay, the other pod's all do.
    engine.remove("swp-a");
    let after_a = NodeState::take(engine.host());
    assert_eq!(rules_of_all(&after_a, &a_ips), Vec::<String>::new(), "swp-a's reference rules stayed");
    let b_rules = rules_of_all(&with_go, &b_ips);
    assert_eq!(rules_of_all(&after_a, &b_ips), b_rules, "swp-b's rules changed");

    // A pod of ours on the stopped pod's hostPort gets its traffic (a DNAT of the
    // reference's left behind would send it to the old address).
    let c_ips = engine.start_web("swp-c", ports[0]);
    assert!(c_ips.iter().all(|ip| !a_ips.contains(ip)), "host-local gave a stopped pod's address again");
    // Ours made it: our portmap forwards with nftables, the reference's with iptables.
    let with_c = NodeState::take(engine.host());
    let dnat_to_c: Vec<String> =
        rules_of_all(&with_c, &c_ips).into_iter().filter(|r| r.contains("-j DNAT")).collect();
    assert!(dnat_to_c.is_empty(), "the Go portmap still ran: {dnat_to_c:?}");
    assert_answers(engine.host(), &everywhere, ports[0], "swp-c", "a new pod on a reused hostPort");
    assert_answers(engine.host(), &everywhere, ports[1], "swp-b", "beside the new pod");

    engine.remove("swp-b");
    engine.remove("swp-c");
    assert_back_to(engine.host(), &baseline, "every pod stopped by ours");
}

/// containerd's CRI plugin as kubelet drives it, and the sandbox ID of each pod by name.
struct CriNode {
    containerd: Containerd,
    cri: Cri,
    pods: HashMap<String, String>,
}

impl Engine for CriNode {
    fn host(&self) -> &EngineHost {
        self.containerd.host()
    }

    fn swap_plugins(&mut self, plugins: PluginDir) {
        self.containerd.swap_plugins(plugins, CHAIN);
    }

    fn start_web(&mut self, name: &str, host_port: u16) -> Vec<String> {
        let mut config = pod(name);
        config.port_mappings[0].host_port = host_port.into();
        let id = self
            .cri
            .run_pod(config.clone())
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", self.containerd.log()));
        let command = http_server(name);
        self.cri.start_container(&id, config, "web", &command.iter().map(String::as_str).collect::<Vec<_>>());
        let (ip, additional, _) = self.cri.status(&id);
        self.pods.insert(name.to_string(), id);
        std::iter::once(ip).chain(additional).collect()
    }

    fn remove(&mut self, name: &str) {
        let id = self.pods.remove(name).expect("a pod the test started");
        self.cri.stop(&id);
        self.cri.remove(&id);
    }
}

/// The Kubernetes-style dual-stack network of the CRI suite (bridge with `ipMasq` +
/// host-local, portmap, firewall, tuning, bandwidth) with the firewall on its iptables
/// backend. portmap names no backend: the Go one knows only iptables, ours defaults to
/// nftables, so a swapped node has both.
fn cri_conflist() -> String {
    let mut list: Value = serde_json::from_str(&dual_stack_conflist()).unwrap();
    let firewall = list["plugins"].as_array_mut().unwrap().iter_mut().find(|p| p["type"] == "firewall");
    firewall.expect("the CRI conflist has a firewall")["backend"] = "iptables".into();
    list.to_string()
}

#[test]
fn containerd_cri_pods_of_the_go_plugins_stopped_by_ours_leave_nothing_of_the_reference() {
    let started = Instant::now();
    let containerd = Containerd::start_cri(ours(), Some(&cri_conflist()), CHAIN);
    let cri = Cri::connect(&containerd);
    let mut node = CriNode { containerd, cri, pods: HashMap::new() };
    let gateway6 = format!("[{SUBNET6_PREFIX}1]");
    swap_scenario(&mut node, &[GATEWAY, &gateway6], [18081, 18082]);
    eprintln!("cni-e2e [swap]: the containerd CRI scenario took {:?}", started.elapsed());
}

/// podman's CNI backend on its default network (podman's own conflist: bridge with
/// `ipMasq` + host-local, portmap, firewall naming no backend, tuning; IPv4 only); pods
/// are containers.
struct PodmanNode(Podman);

impl Engine for PodmanNode {
    fn host(&self) -> &EngineHost {
        self.0.host()
    }

    fn swap_plugins(&mut self, plugins: PluginDir) {
        self.0.swap_plugins(plugins, PODMAN_CHAIN);
    }

    fn start_web(&mut self, name: &str, host_port: u16) -> Vec<String> {
        let command = http_server(name);
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        self.0.start(name, &["-p", &format!("{host_port}:80")], &command);
        vec![self.0.eth0_ipv4(name).addr.to_string()]
    }

    fn remove(&mut self, name: &str) {
        // Returns once the container is gone, its network torn down.
        self.0.ok(&["rm", "--force", "--time", "0", name]);
    }
}

#[test]
fn podman_containers_of_the_go_plugins_stopped_by_ours_leave_nothing_of_the_reference() {
    let started = Instant::now();
    let plugins = ours();
    plugins.require(PODMAN_CHAIN);
    let podman = Podman::set_up_on(plugins, NetworkBackend::Cni);
    let (_subnet, gateway) = podman.network_subnet(DEFAULT_NETWORK);
    swap_scenario(&mut PodmanNode(podman), &[&gateway.to_string()], [18091, 18092]);
    eprintln!("cni-e2e [swap]: the podman scenario took {:?}", started.elapsed());
}
