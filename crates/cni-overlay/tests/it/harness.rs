//! Three "hosts" (network namespaces) joined by an underlay bridge in a throwaway
//! namespace, a real 3-member etcd cluster on 127.0.0.1, one overlay agent per host and a
//! pod per host attached by the real bridge + host-local plugins. Names carry `ov`, or the
//! prefix given to [`Cluster::start`]. [`Layout`] picks the underlay's family (IPv4 or
//! IPv6) and puts hosts on a second L2 segment that the underlay namespace routes to.

use std::net::SocketAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cni_net::netlink::{
    AddressFlags, BridgeOptions, FdbEntry, IpFamily, LinkSpec, Neighbour, NeighbourState, Route, VethSpec,
    MAIN_TABLE,
};
use cni_net::{MacAddr, Netlink};
use cni_testkit::binaries::workspace_binary;
use cni_testkit::etcd::EtcdCluster;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde_json::Value;

pub const TTL: u64 = 3;
pub const DEVICE: &str = "ovvx0";
pub const PREFIX: &str = "/ovtest";

pub struct Host {
    /// The prefix of the test's names (namespaces, temporary directories).
    pub prefix: String,
    pub name: String,
    pub ns: TestNetns,
    pub underlay: IpAddr,
    /// The agent's lease TTL in seconds ([`TTL`] unless a test needs another).
    pub ttl: u64,
    pub dir: PathBuf,
    pub agent: Option<Child>,
    pub pod: Option<TestNetns>,
    pub pod_ip: Option<Ipv4Addr>,
    /// The pod's IPv6 address, with a dual-stack conflist.
    pub pod_ip6: Option<Ipv6Addr>,
}

/// How the hosts' underlay is laid out.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Underlay addresses of IPv6 (`fd00:91::N/64`) instead of IPv4 (`192.168.91.N/24`).
    pub ipv6: bool,
    /// Hosts (by index) on a second L2 segment (`192.168.92.0/24`, `fd00:92::/64`),
    /// reached from the first through the underlay namespace as a router.
    pub routed: Vec<usize>,
}

impl Layout {
    /// Host `i`'s underlay address on segment `segment` (1 or 2), with its prefix.
    pub fn address(&self, segment: u8, i: usize) -> IpNet {
        let host = i as u8 + 1;
        self.on_segment(segment, host)
    }

    /// The underlay namespace's (the router's) address on a segment.
    pub fn router(&self, segment: u8) -> IpNet {
        self.on_segment(segment, 254)
    }

    fn on_segment(&self, segment: u8, host: u8) -> IpNet {
        if self.ipv6 {
            let address = Ipv6Addr::new(0xfd00, 0x90 + u16::from(segment), 0, 0, 0, 0, 0, u16::from(host));
            IpNet::V6(Ipv6Net::new(address, 64).unwrap())
        } else {
            IpNet::V4(Ipv4Net::new(Ipv4Addr::new(192, 168, 90 + segment, host), 24).unwrap())
        }
    }

    pub fn segment_of(&self, i: usize) -> u8 {
        if self.routed.contains(&i) {
            2
        } else {
            1
        }
    }
}

pub struct Cluster {
    pub etcd: EtcdCluster,
    pub underlay_ns: TestNetns,
    pub hosts: Vec<Host>,
    /// The CNI bin directory (shared by the tests of one build, see
    /// [`cni_testkit::binaries::installed_plugins`]: made on the host, it is there for the
    /// kernel rig's guest too).
    pub plugins: PathBuf,
    pub _tmp: tempfile::TempDir,
}

/// The plugins installed for this build (see [`Cluster::plugins`]).
pub fn plugin_dir() -> PathBuf {
    let binary = workspace_binary("cni-plugins", "cni-plugins");
    cni_testkit::binaries::installed_plugins(&binary, std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Polls `check` until it returns Some or `limit` passes (the testkit's one polling loop).
pub use cni_testkit::poll::poll as wait_for;

/// The overlay entries one host has for peers: routes, permanent neighbours and FDB
/// entries with a remote on its VXLAN device, from netlink dumps.
///
/// `routes` and `neighbours` are of both families; `direct` are the routes into the pod
/// networks via a gateway on the underlay interface (direct routing).
#[derive(Debug, Default)]
pub struct Entries {
    pub routes: Vec<Route>,
    pub neighbours: Vec<Neighbour>,
    pub fdb: Vec<FdbEntry>,
    pub direct: Vec<Route>,
}

impl Entries {
    pub fn count(&self) -> (usize, usize, usize) {
        (self.routes.len(), self.neighbours.len(), self.fdb.len())
    }

    pub fn has_subnet(&self, subnet: Ipv4Net) -> bool {
        self.routes.iter().any(|r| r.destination == ipnet::IpNet::V4(subnet))
            || self.neighbours.iter().any(|n| n.address == IpAddr::V4(subnet.network()))
    }

    pub fn has_underlay(&self, underlay: impl Into<IpAddr>) -> bool {
        let underlay = underlay.into();
        self.fdb.iter().any(|f| f.dst == Some(underlay))
    }

    /// Any route (over the device or direct) to `subnet`.
    pub fn routes_to(&self, subnet: impl Into<IpNet>) -> bool {
        let subnet = subnet.into();
        self.routes.iter().chain(&self.direct).any(|r| r.destination == subnet)
    }

    /// The direct routes as (destination, gateway), sorted.
    pub fn direct_routes(&self) -> Vec<(IpNet, IpAddr)> {
        let mut routes: Vec<(IpNet, IpAddr)> =
            self.direct.iter().filter_map(|r| Some((r.destination, r.gateway?))).collect();
        routes.sort();
        routes
    }

    /// The device's routes' destinations, sorted.
    pub fn vxlan_routes(&self) -> Vec<IpNet> {
        let mut routes: Vec<IpNet> = self.routes.iter().map(|r| r.destination).collect();
        routes.sort();
        routes
    }
}

/// TCP from `from`'s pod to `to`'s pod over IPv4 (or IPv6), 64 KiB each way (dozens of
/// full-size segments).
pub fn pods_talk_over(from: &Host, to: &Host, ipv6: bool) -> Result<(), String> {
    let family = if ipv6 { "IPv6" } else { "IPv4" };
    let target: IpAddr = match ipv6 {
        false => to.pod_ip.ok_or("no IPv4 pod address")?.into(),
        true => to.pod_ip6.ok_or("no IPv6 pod address")?.into(),
    };
    let server = tcp_echo_server(to.pod.as_ref().unwrap().netns(), SocketAddr::new(target, 0))
        .map_err(|e| format!("{family} server in {}'s pod: {e}", to.name))?;
    let payload: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    tcp_echo(from.pod.as_ref().unwrap().netns(), server.local_addr(), &payload, Duration::from_secs(5))
        .map_err(|e| format!("{family} {} -> {}: {e}", from.name, to.name))
}

/// TCP over IPv4 between the pods of `from` and `to`.
pub fn pods_talk(from: &Host, to: &Host) -> Result<(), String> {
    pods_talk_over(from, to, false)
}

/// A counter of the `Ip:` line of `/proc/net/snmp` in `ns` (e.g. `FragCreates`).
pub fn ip_counter(ns: &TestNetns, name: &str) -> u64 {
    // thread-self: /proc/self/net would show the main thread's namespace, not this one's.
    let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/snmp")).unwrap().unwrap();
    let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
    let at =
        names.split_whitespace().position(|n| n == name).unwrap_or_else(|| panic!("no Ip counter {name}"));
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

impl Host {
    pub fn ns(&self) -> &TestNetns {
        &self.ns
    }

    pub fn netlink(&self) -> Netlink {
        self.ns.netlink().expect("netlink in the host")
    }

    pub fn subnet_file(&self) -> PathBuf {
        self.dir.join("subnet.env")
    }

    pub fn conflist_path(&self) -> PathBuf {
        self.dir.join("overlay.conflist")
    }

    pub fn subnet(&self) -> Option<Ipv4Net> {
        cni_overlay::cniconf::read_subnet(&self.subnet_file())
    }

    pub fn entries(&self) -> Entries {
        let mut nl = self.netlink();
        let pod_networks: [IpNet; 2] = ["10.244.0.0/16".parse().unwrap(), "fd00:244::/48".parse().unwrap()];
        let underlay = nl.require_link("ovu0").unwrap().index;
        let routes: Vec<Route> = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .flat_map(|family| nl.routes(family, Some(MAIN_TABLE)).unwrap())
            .filter(|r| r.gateway.is_some())
            .collect();
        let direct = routes
            .iter()
            .filter(|r| r.oif == Some(underlay) && pod_networks.iter().any(|n| n.contains(&r.destination)))
            .cloned()
            .collect();
        let Some(device) = nl.link_by_name(DEVICE).unwrap() else {
            return Entries { direct, ..Entries::default() };
        };
        Entries {
            routes: routes.into_iter().filter(|r| r.oif == Some(device.index)).collect(),
            neighbours: [IpFamily::V4, IpFamily::V6]
                .into_iter()
                .flat_map(|family| nl.neighbours(family, Some(device.index)).unwrap())
                .filter(|n| n.state == NeighbourState::Permanent)
                .collect(),
            fdb: nl.fdb_entries(device.index).unwrap().into_iter().filter(|f| f.dst.is_some()).collect(),
            direct,
        }
    }

    /// The IPv6 subnet the agent wrote to its env file (dual-stack).
    pub fn subnet6(&self) -> Option<Ipv6Net> {
        cni_overlay::cniconf::read_subnet6(&self.subnet_file())
    }

    /// Starts the agent (in the test's own namespace, where etcd listens on 127.0.0.1,
    /// programming the host's namespace through `--netns`) and waits until it holds its
    /// subnet (its log says so), so its signal handlers are in place.
    pub fn start_agent(&mut self, endpoints: &[String], extra: &[&str]) {
        let ready_lines = || self.agent_log().matches("holding the subnet").count();
        let before = ready_lines();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("agent.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cni-overlay-agent"))
            .args(["--etcd-endpoints", &endpoints.join(","), "--iface", "ovu0", "--node", &self.name])
            .args([
                "--prefix",
                PREFIX,
                "--ttl",
                &self.ttl.to_string(),
                "--device",
                DEVICE,
                "--bridge",
                "ovcni0",
            ])
            .args(["--vni", "42", "--netns"])
            .arg(self.ns.path())
            .arg("--subnet-file")
            .arg(self.subnet_file())
            .arg("--conflist")
            .arg(self.conflist_path())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting cni-overlay-agent");
        let ready = wait_for(Duration::from_secs(10), || (ready_lines() > before).then_some(()));
        assert!(ready.is_some(), "agent {} did not start:\n{}", self.name, self.agent_log());
        self.agent = Some(child);
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// SIGKILL: the agent gets no chance to clean up.
    pub fn kill_agent(&mut self) {
        if let Some(mut child) = self.agent.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Attaches a pod namespace with the conflist the agent wrote (bridge + host-local).
    pub fn add_pod(&mut self, plugins: &Path) {
        let list: Value =
            serde_json::from_str(&std::fs::read_to_string(self.conflist_path()).unwrap()).unwrap();
        let mut conf = list["plugins"][0].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        conf["name"] = list["name"].clone();
        conf["ipam"]["dataDir"] = self.dir.join("ipam").display().to_string().into();
        let pod = TestNetns::with_prefix(&format!("{}pod", self.prefix)).unwrap();
        let out = PluginCall::new(plugins.join("bridge"), "ADD")
            .config(&conf)
            .container_id(&format!("{}-{}", self.prefix, self.name))
            .netns(pod.path())
            .in_namespace(self.ns.path())
            .run();
        let result = out.json();
        for ip in result["ips"].as_array().expect("ips") {
            match ip["address"].as_str().expect("an address").parse::<IpNet>().unwrap() {
                IpNet::V4(ip) => {
                    assert!(self.subnet().unwrap().contains(&ip.addr()), "{ip} is outside the node's subnet");
                    self.pod_ip = Some(ip.addr());
                }
                IpNet::V6(ip) => {
                    assert!(
                        self.subnet6().unwrap().contains(&ip.addr()),
                        "{ip} is outside the node's subnet"
                    );
                    self.pod_ip6 = Some(ip.addr());
                }
            }
        }
        assert!(self.pod_ip.is_some(), "no IPv4 address in {result}");
        self.pod = Some(pod);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill_agent();
    }
}

impl Cluster {
    /// etcd, the underlay and three hosts with their underlay addresses; no agents yet.
    pub fn new() -> Cluster {
        Cluster::start("ov", EtcdCluster::start("ov", 3), 3)
    }

    /// `hosts` hosts (at most 9) on `etcd`, every name in the test carrying `prefix`.
    pub fn start(prefix: &str, etcd: EtcdCluster, count: usize) -> Cluster {
        Cluster::start_with(prefix, etcd, count, &Layout::default())
    }

    /// The same with the underlay laid out as `layout` says.
    pub fn start_with(prefix: &str, etcd: EtcdCluster, count: usize, layout: &Layout) -> Cluster {
        cni_testkit::ns::require_root();
        let tmp = tempfile::Builder::new().prefix(&format!("{prefix}-overlay-")).tempdir().unwrap();
        let plugins = plugin_dir();

        let underlay = TestNetns::with_prefix(&format!("{prefix}u")).unwrap();
        let mut unl = underlay.netlink().unwrap();
        let mut bridges = Vec::new();
        for segment in [1u8, 2] {
            let name = if segment == 1 { "ovbr".to_string() } else { format!("ovbr{segment}") };
            // A fixed MAC: a bridge otherwise takes its lowest port's, so a test that joins
            // the segments with a veth changes the router's MAC under the hosts' ARP
            // entries, and parting them changes it back: the hosts lose their gateway until
            // their entries time out.
            let mac = MacAddr([0x02, 0, 0, 0, 0xfe, segment]);
            let bridge = unl.add_bridge(&LinkSpec::new(&name).mac(mac), &BridgeOptions::default()).unwrap();
            let bridge = bridge.map(|l| l.index).unwrap_or_else(|| unl.require_link(&name).unwrap().index);
            unl.set_link_up(bridge).unwrap();
            if !layout.routed.is_empty() {
                unl.add_address(bridge, layout.router(segment), AddressFlags::Nodad).unwrap();
            }
            bridges.push(bridge);
        }
        if !layout.routed.is_empty() {
            let key = if layout.ipv6 { "net/ipv6/conf/all/forwarding" } else { "net/ipv4/ip_forward" };
            cni_net::sysctl::write_in(underlay.netns(), key, "1").unwrap();
        }
        let mut hosts = Vec::new();
        for i in 0..count {
            let name = format!("{prefix}-{}", (b'a' + i as u8) as char);
            let ns = TestNetns::with_prefix(&format!("{prefix}h")).unwrap();
            let port = format!("ovp{i}");
            unl.add_veth(&VethSpec {
                link: LinkSpec::new(&port),
                peer: LinkSpec::new("ovu0").netns(ns.netns()),
            })
            .unwrap();
            let port = unl.require_link(&port).unwrap();
            let segment = layout.segment_of(i);
            unl.set_link_master(port.index, bridges[usize::from(segment) - 1]).unwrap();
            unl.set_link_up(port.index).unwrap();
            let address = layout.address(segment, i);
            let mut nl = ns.netlink().unwrap();
            let link = nl.require_link("ovu0").unwrap();
            nl.add_address(link.index, address, AddressFlags::Nodad).unwrap();
            nl.set_link_up(link.index).unwrap();
            if !layout.routed.is_empty() {
                let other = layout.router(3 - segment).trunc();
                let via = layout.router(segment).addr();
                nl.replace_route(&Route::new(other).gateway(via).oif(link.index)).unwrap();
            }
            let dir = tmp.path().join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            hosts.push(Host {
                prefix: prefix.to_string(),
                name,
                ns,
                underlay: address.addr(),
                ttl: TTL,
                dir,
                agent: None,
                pod: None,
                pod_ip: None,
                pod_ip6: None,
            });
        }
        Cluster { etcd, underlay_ns: underlay, hosts, plugins, _tmp: tmp }
    }

    /// Every agent's log, for failure messages.
    pub fn logs(&self) -> String {
        self.hosts
            .iter()
            .map(|h| format!("--- agent {} ---\n{}", h.name, h.agent_log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// TCP between the pods of every ordered pair of hosts, over IPv4 and (with `ipv6`)
    /// IPv6; panics with the agents' logs on the first failure.
    pub fn all_pods_talk(&self, ipv6: bool) {
        let families: &[bool] = if ipv6 { &[false, true] } else { &[false] };
        for from in &self.hosts {
            for to in self.hosts.iter().filter(|h| h.name != from.name) {
                for &v6 in families {
                    pods_talk_over(from, to, v6).unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
                }
            }
        }
    }

    /// Waits until host `i`'s entries satisfy `check`; panics with them and the logs if
    /// they do not within `limit`.
    pub fn wait_entries(&self, i: usize, limit: Duration, what: &str, check: impl Fn(&Entries) -> bool) {
        let reached = wait_for(limit, || check(&self.hosts[i].entries()).then_some(()));
        assert!(reached.is_some(), "host {i}: {what}: {:?}\n{}", self.hosts[i].entries(), self.logs());
    }

    /// The indices of every host but `i`.
    pub fn others(&self, i: usize) -> Vec<usize> {
        (0..self.hosts.len()).filter(|&p| p != i).collect()
    }

    /// Waits until every host has exactly its peers' entries; panics with the first
    /// host's that does not within `limit`, and the logs.
    pub fn assert_full_mesh(&self, limit: Duration) {
        for i in 0..self.hosts.len() {
            assert!(
                self.wait_peers(i, &self.others(i), limit),
                "host {i} did not get exactly its peers' entries: {:?}\n{}",
                self.hosts[i].entries(),
                self.logs()
            );
        }
    }

    /// Waits until host `i` has exactly the entries of `peers` (by index).
    pub fn wait_peers(&self, i: usize, peers: &[usize], limit: Duration) -> bool {
        let want: Vec<(Ipv4Net, IpAddr)> = peers
            .iter()
            .map(|&p| (self.hosts[p].subnet().expect("peer subnet"), self.hosts[p].underlay))
            .collect();
        wait_for(limit, || {
            let entries = self.hosts[i].entries();
            let exact = entries.count() == (want.len(), want.len(), want.len())
                && want.iter().all(|(s, u)| entries.has_subnet(*s) && entries.has_underlay(*u));
            exact.then_some(())
        })
        .is_some()
    }
}
