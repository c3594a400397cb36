//! Three "hosts" (network namespaces) joined by an underlay bridge in a throwaway
//! namespace, a real 3-member etcd cluster on 127.0.0.1, one overlay agent per host and a
//! pod per host attached by the real bridge + host-local plugins. Names carry `ov`, or the
//! prefix given to [`Cluster::start`].

// Each test binary uses only part of the harness.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_etcd_testing::EtcdCluster;
use cni_net::netlink::{
    BridgeOptions, FdbEntry, IpFamily, LinkSpec, Neighbour, NeighbourState, Route, VethSpec, MAIN_TABLE,
};
use cni_net::Netlink;
use cni_testkit::binaries::workspace_binary;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use ipnet::Ipv4Net;
use serde_json::Value;

pub const TTL: u64 = 3;
pub const DEVICE: &str = "ovvx0";
pub const PREFIX: &str = "/ovtest";

pub struct Host {
    /// The prefix of the test's names (namespaces, temporary directories).
    pub prefix: String,
    pub name: String,
    pub ns: TestNetns,
    pub underlay: Ipv4Addr,
    pub dir: PathBuf,
    pub agent: Option<Child>,
    pub pod: Option<TestNetns>,
    pub pod_ip: Option<Ipv4Addr>,
}

pub struct Cluster {
    pub etcd: EtcdCluster,
    pub _underlay: TestNetns,
    pub hosts: Vec<Host>,
    pub plugins: tempfile::TempDir,
    pub _tmp: tempfile::TempDir,
}

/// Polls `check` until it returns Some or `limit` passes.
pub fn wait_for<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The overlay entries one host has for peers: routes, permanent neighbours and FDB
/// entries with a remote on its VXLAN device, from netlink dumps.
#[derive(Debug, Default)]
pub struct Entries {
    pub routes: Vec<Route>,
    pub neighbours: Vec<Neighbour>,
    pub fdb: Vec<FdbEntry>,
}

impl Entries {
    pub fn count(&self) -> (usize, usize, usize) {
        (self.routes.len(), self.neighbours.len(), self.fdb.len())
    }

    pub fn has_subnet(&self, subnet: Ipv4Net) -> bool {
        self.routes.iter().any(|r| r.destination == ipnet::IpNet::V4(subnet))
            || self.neighbours.iter().any(|n| n.address == IpAddr::V4(subnet.network()))
    }

    pub fn has_underlay(&self, underlay: Ipv4Addr) -> bool {
        self.fdb.iter().any(|f| f.dst == Some(IpAddr::V4(underlay)))
    }
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
        let Some(device) = nl.link_by_name(DEVICE).unwrap() else { return Entries::default() };
        Entries {
            routes: nl
                .routes(IpFamily::V4, Some(MAIN_TABLE))
                .unwrap()
                .into_iter()
                .filter(|r| r.oif == Some(device.index) && r.gateway.is_some())
                .collect(),
            neighbours: nl
                .neighbours(IpFamily::V4, Some(device.index))
                .unwrap()
                .into_iter()
                .filter(|n| n.state == NeighbourState::Permanent)
                .collect(),
            fdb: nl.fdb_entries(device.index).unwrap().into_iter().filter(|f| f.dst.is_some()).collect(),
        }
    }

    /// Starts the agent (in the test's own namespace, where etcd listens on 127.0.0.1,
    /// programming the host's namespace through `--netns`) and waits until it holds its
    /// subnet (its log says so), so its signal handlers are in place.
    pub fn start_agent(&mut self, endpoints: &[String], extra: &[&str]) {
        let ready_lines = || self.agent_log().matches(" holds ").count();
        let before = ready_lines();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("agent.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cni-overlay-agent"))
            .args(["--etcd-endpoints", &endpoints.join(","), "--iface", "ovu0", "--node", &self.name])
            .args(["--prefix", PREFIX, "--ttl", &TTL.to_string(), "--device", DEVICE, "--bridge", "ovcni0"])
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
        let address = result["ips"][0]["address"].as_str().expect("an address");
        let ip: Ipv4Net = address.parse().unwrap();
        assert!(self.subnet().unwrap().contains(&ip.addr()), "{ip} is outside the node's subnet");
        self.pod_ip = Some(ip.addr());
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
        cni_testkit::ns::require_root();
        let tmp = tempfile::Builder::new().prefix(&format!("{prefix}-overlay-")).tempdir().unwrap();
        let plugins = tempfile::Builder::new().prefix(&format!("{prefix}-plugins-")).tempdir().unwrap();
        let binary = workspace_binary("cni-plugins", "cni-plugins");
        let status =
            Command::new(&binary).arg("install").arg(plugins.path()).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "cni-plugins install");

        let underlay = TestNetns::with_prefix(&format!("{prefix}u")).unwrap();
        let mut unl = underlay.netlink().unwrap();
        let bridge = unl.add_bridge(&LinkSpec::new("ovbr"), &BridgeOptions::default()).unwrap();
        let bridge = bridge.map(|l| l.index).unwrap_or_else(|| unl.require_link("ovbr").unwrap().index);
        unl.set_link_up(bridge).unwrap();
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
            unl.set_link_master(port.index, bridge).unwrap();
            unl.set_link_up(port.index).unwrap();
            let underlay_ip = Ipv4Addr::new(192, 168, 91, i as u8 + 1);
            let mut nl = ns.netlink().unwrap();
            let link = nl.require_link("ovu0").unwrap();
            let net = ipnet::IpNet::V4(Ipv4Net::new(underlay_ip, 24).unwrap());
            nl.add_address(link.index, net, cni_net::netlink::AddressFlags::empty()).unwrap();
            nl.set_link_up(link.index).unwrap();
            let dir = tmp.path().join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            hosts.push(Host {
                prefix: prefix.to_string(),
                name,
                ns,
                underlay: underlay_ip,
                dir,
                agent: None,
                pod: None,
                pod_ip: None,
            });
        }
        Cluster { etcd, _underlay: underlay, hosts, plugins, _tmp: tmp }
    }

    /// Every agent's log, for failure messages.
    pub fn logs(&self) -> String {
        self.hosts
            .iter()
            .map(|h| format!("--- agent {} ---\n{}", h.name, h.agent_log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until host `i` has exactly the entries of `peers` (by index).
    pub fn wait_peers(&self, i: usize, peers: &[usize], limit: Duration) -> bool {
        let want: Vec<(Ipv4Net, Ipv4Addr)> = peers
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
