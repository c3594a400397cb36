//! A node swapped from the Go reference plugins (Debian's containernetworking-plugins in
//! /usr/lib/cni) to ours while containers run: podman's chain — bridge (host-local,
//! `ipMasq`) → portmap (a hostPort) → firewall (no backend named, so the reference uses
//! iptables and ours nftables) — made by the Go plugins, then stopped (DEL) or collected
//! (GC) by ours. Ours must remove exactly what the reference made for that attachment,
//! leaving another running Go attachment and the administrator's rules alone, and start
//! no iptables process when there is nothing of the reference's. `iptables-save` and
//! `ip6tables-save` inside the test's host namespace are the oracle.

use crate::common;
use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::runner::{PluginCall, PluginOutput};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, EchoServer};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PREFIX: &str = "ar";
const GO: &str = "/usr/lib/cni";
const HOST_IP: &str = "192.168.93.1";
const NETWORK: &str = "arnet";

/// The three plugins of the chain, in ADD order.
const CHAIN: [&str; 3] = ["bridge", "portmap", "firewall"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Go,
    Ours,
}

struct Node {
    env: HostAndContainers,
    outside: TestNetns,
    dir: tempfile::TempDir,
    /// Wrappers of iptables-save/-restore that log each run: put first in PATH of our
    /// plugins, they count the processes a DEL starts.
    spy: PathBuf,
}

impl Node {
    fn new(containers: usize) -> Node {
        for plugin in CHAIN.iter().chain(&["host-local"]) {
            assert!(
                Path::new(GO).join(plugin).exists(),
                "{GO}/{plugin} is missing: install containernetworking-plugins"
            );
        }
        let env = HostAndContainers::with_prefix(PREFIX, containers).unwrap();
        let outside = TestNetns::with_prefix(PREFIX).unwrap();
        let mut host = env.host.netlink().unwrap();
        let peer = LinkSpec::new("aro1").netns(outside.netns());
        host.add_veth(&VethSpec { link: LinkSpec::new("aro0"), peer }).unwrap();
        let mut far = outside.netlink().unwrap();
        for (nl, name, addr) in
            [(&mut host, "aro0", "192.168.93.1/24"), (&mut far, "aro1", "192.168.93.2/24")]
        {
            let link = nl.require_link(name).unwrap();
            nl.add_address(link.index, addr.parse().unwrap(), AddressFlags::Nodad).unwrap();
            nl.set_link_up(link.index).unwrap();
        }
        let dir = tempfile::Builder::new().prefix("ar-adopt").tempdir().unwrap();
        let spy = dir.path().join("spy");
        std::fs::create_dir(&spy).unwrap();
        let log = dir.path().join("spawned.log");
        for tool in ["iptables-save", "iptables-restore", "ip6tables-save", "ip6tables-restore"] {
            let script =
                format!("#!/bin/sh\necho \"{tool} $*\" >> {}\nexec /usr/sbin/{tool} \"$@\"\n", log.display());
            let path = spy.join(tool);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        Node { env, outside, dir, spy }
    }

    fn host(&self) -> &TestNetns {
        &self.env.host
    }

    fn container(&self, i: usize) -> &TestNetns {
        &self.env.containers[i]
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    /// The iptables processes our plugins started so far.
    fn spawned(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("spawned.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn conf(&self, plugin: &str, host_port: u16, container_port: u16, prev: Option<&Value>) -> Value {
        let mut conf = match plugin {
            "bridge" => json!({"type": "bridge", "bridge": "arbr0", "isGateway": true, "ipMasq": true,
                "hairpinMode": true,
                "ipam": {"type": "host-local", "dataDir": self.data_dir(),
                         "ranges": [[{"subnet": "10.93.0.0/24"}], [{"subnet": "fd93:1::/64"}]],
                         "routes": [{"dst": "0.0.0.0/0"}]}}),
            "portmap" => json!({"type": "portmap", "capabilities": {"portMappings": true},
                "runtimeConfig": {"portMappings": [
                    {"hostPort": host_port, "containerPort": container_port, "protocol": "tcp"}]}}),
            // podman's entry: no backend, as the reference and ours each default.
            _ => json!({"type": plugin}),
        };
        conf["cniVersion"] = json!("1.0.0");
        conf["name"] = json!(NETWORK);
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        conf
    }

    fn call(&self, who: Impl, plugin: &str, command: &str, i: usize, conf: &Value) -> PluginCall {
        let call = match who {
            Impl::Go => {
                PluginCall::from_host(Path::new(GO).join(plugin), command, Path::new(GO), self.host(), None)
            }
            Impl::Ours => common::call(plugin, command, self.host(), None, conf)
                .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", self.spy.display())),
        };
        call.netns(self.container(i).path()).container_id(self.container(i).name()).config(conf)
    }

    /// The chain's ADD for container `i`; returns the final result.
    fn attach(
        &self,
        who: Impl,
        i: usize,
        host_port: u16,
        container_port: u16,
        cni_args: Option<&str>,
    ) -> Value {
        let mut prev: Option<Value> = None;
        for plugin in CHAIN {
            let conf = self.conf(plugin, host_port, container_port, prev.as_ref());
            let mut call = self.call(who, plugin, "ADD", i, &conf);
            if let Some(args) = cni_args {
                call = call.args(args);
            }
            prev = Some(call.run().json());
        }
        prev.unwrap()
    }

    /// The chain's DEL for container `i`, in reverse, each with the cached result; returns
    /// how long each plugin took.
    fn detach(
        &self,
        who: Impl,
        i: usize,
        host_port: u16,
        container_port: u16,
        result: &Value,
    ) -> Vec<Duration> {
        CHAIN
            .iter()
            .rev()
            .map(|plugin| {
                let conf = self.conf(plugin, host_port, container_port, Some(result));
                let out = self.call(who, plugin, "DEL", i, &conf).run();
                ok(&out, plugin);
                out.elapsed
            })
            .collect()
    }

    /// `iptables-save` and `ip6tables-save` of the host namespace as lines, without
    /// comments and counters, each prefixed with its family.
    fn tables(&self) -> BTreeSet<String> {
        let mut lines = BTreeSet::new();
        for (family, tool) in [("v4", "iptables-save"), ("v6", "ip6tables-save")] {
            let out = self.host().command(tool).output().unwrap();
            assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
            for line in String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.starts_with('#')) {
                let line = match line.find(" [") {
                    Some(i) if line.starts_with(':') => &line[..i],
                    _ => line,
                };
                lines.insert(format!("{family} {line}"));
            }
        }
        lines
    }

    fn host_cmd(&self, program: &str, args: &[&str]) {
        let out = self.host().command(program).args(args).output().unwrap();
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The administrator's own rules, one of them naming in its comment the chain the
    /// reference makes for container `victim`: it must survive that chain's removal.
    fn add_admin_rules(&self, victim: usize) {
        let comment = format!("admin: keep, not -j {}", reference_chain("", self.container(victim).name()));
        let v4 = ["-t", "nat", "-A", "POSTROUTING", "-s", "10.93.0.0/24", "-d", "198.51.100.0/24"];
        self.host_cmd(
            "iptables",
            &[&v4[..], &["-m", "comment", "--comment", &comment, "-j", "RETURN"]].concat(),
        );
        let v6 =
            ["-t", "nat", "-A", "POSTROUTING", "-s", "fd93:1::/64", "-d", "2001:db8::/32", "-j", "RETURN"];
        self.host_cmd("ip6tables", &v6);
        self.host_cmd("iptables", &["-A", "FORWARD", "-d", "198.51.100.7/32", "-j", "DROP"]);
    }

    fn hostport_reaches(&self, port: u16) -> bool {
        let addr: SocketAddr = format!("{HOST_IP}:{port}").parse().unwrap();
        tcp_echo(self.outside.netns(), addr, b"hostPort", Duration::from_secs(3)).is_ok()
    }

    fn server(&self, i: usize, ip: &str, port: u16) -> EchoServer {
        tcp_echo_server(self.container(i).netns(), format!("{ip}:{port}").parse().unwrap()).unwrap()
    }

    fn reservations(&self) -> Vec<String> {
        cni_testkit::host_local::reservations(&self.data_dir(), NETWORK)
    }
}

#[track_caller]
fn ok(out: &PluginOutput, what: &str) {
    assert!(out.success(), "{what} failed ({}): {}\nstderr: {}", out.status, out.stdout, out.stderr);
}

/// The reference's chain name for an attachment of [`NETWORK`]: `CNI-<infix>` and the
/// hex SHA-512 of network name and container ID, 28 characters (its FormatChainName).
fn reference_chain(infix: &str, container_id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha512::digest(format!("{NETWORK}{container_id}"));
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("CNI-{infix}{hex}")[..28].to_string()
}

/// Each address of the result as a rule names it: `10.93.0.3/32`, `fd93:1::3/128`.
fn host_addresses(result: &Value) -> Vec<String> {
    let ips = result["ips"].as_array().unwrap();
    ips.iter()
        .map(|ip| {
            let addr = ip["address"].as_str().unwrap().split('/').next().unwrap();
            format!("{addr}/{}", if addr.contains(':') { 128 } else { 32 })
        })
        .collect()
}

fn v4_of(result: &Value) -> String {
    let ips = result["ips"].as_array().unwrap();
    let v4 = ips.iter().map(|ip| ip["address"].as_str().unwrap()).find(|a| a.contains('.')).unwrap();
    v4.split('/').next().unwrap().to_string()
}

/// Whether a saved line belongs to the attachment `needles` identify; the
/// administrator's rules (which may name its chain in a comment) never do.
fn mentions(line: &str, needles: &[String]) -> bool {
    !line.contains("admin:") && needles.iter().any(|n| line.contains(n.as_str()))
}

/// Containers: 0 warm-up, 1 "a" (stopped by ours), 2 "b" (keeps running), 3 "c" (a later
/// pod of ours taking a's address and hostPort).
#[test]
fn go_attachments_stopped_by_ours_leave_nothing_of_the_reference() {
    let node = Node::new(4);
    node.add_admin_rules(1);
    // Warm-up: what a Go attachment made and removed leaves (the shared chains).
    let warm = node.attach(Impl::Go, 0, 18080, 80, None);
    let go_del = node.detach(Impl::Go, 0, 18080, 80, &warm);
    let baseline = node.tables();
    let links = link_names(node.host());

    let a = node.attach(Impl::Go, 1, 18081, 80, None);
    let b = node.attach(Impl::Go, 2, 18082, 80, None);
    let (a_ip, b_ip) = (v4_of(&a), v4_of(&b));
    let _a_server = node.server(1, &a_ip, 80);
    let _b_server = node.server(2, &b_ip, 80);
    assert!(node.hostport_reaches(18081) && node.hostport_reaches(18082), "the Go plugins' hostPorts");
    let with_both = node.tables();
    let mut a_marks: Vec<String> =
        vec![reference_chain("", node.container(1).name()), reference_chain("DN-", node.container(1).name())];
    a_marks.extend(host_addresses(&a));
    for chain in &a_marks[..2] {
        assert!(
            with_both.iter().any(|l| l.starts_with(&format!("v6 :{chain}"))),
            "Go made {chain}: {with_both:#?}"
        );
    }
    assert!(with_both.iter().any(|l| l.contains(&format!("-A CNI-FORWARD -s {a_ip}/32"))), "{with_both:#?}");

    // Swapped: ours stops a.
    assert!(node.spawned().is_empty());
    let ours_del = node.detach(Impl::Ours, 1, 18081, 80, &a);
    let after_a = node.tables();
    let left: Vec<&String> = after_a.iter().filter(|l| mentions(l, &a_marks)).collect();
    assert!(left.is_empty(), "the reference's state of a stays: {left:#?}");
    let lost: Vec<&String> = with_both.difference(&after_a).filter(|l| !mentions(l, &a_marks)).collect();
    assert!(lost.is_empty(), "rules of b or of the administrator went: {lost:#?}");
    // One iptables-save and one iptables-restore per family for each of the three plugins.
    let spawned = node.spawned();
    let saves = spawned.iter().filter(|l| l.contains("-save")).count();
    let restores = spawned.iter().filter(|l| l.contains("-restore")).count();
    assert_eq!((saves, restores), (6, 6), "{spawned:#?}");
    assert!(node.hostport_reaches(18082), "b's hostPort, still the Go plugins'");

    // A pod of ours gets a's address and hostPort, but serves on port 81: the old DNAT
    // (to :80) must be gone. Nothing of the reference's is there for it: no process.
    let c = node.attach(Impl::Ours, 3, 18081, 81, Some(&format!("IgnoreUnknown=1;IP={a_ip}")));
    assert_eq!(v4_of(&c), a_ip);
    let _c_server = node.server(3, &a_ip, 81);
    assert!(node.hostport_reaches(18081), "the reused hostPort reaches the new pod");
    node.detach(Impl::Ours, 3, 18081, 81, &c);
    assert_eq!(node.spawned(), spawned, "ours' own attachment started iptables");
    assert!(node.hostport_reaches(18082));

    node.detach(Impl::Ours, 2, 18082, 80, &b);
    assert_eq!(node.tables(), baseline, "all stopped: the host as after the warm-up pod");
    assert_eq!(node.reservations(), Vec::<String>::new());
    common::eventually("the pods' veths go", || link_names(node.host()) == links);
    eprintln!("timing: DEL of a Go attachment (firewall, portmap, bridge): Go {go_del:?}, ours {ours_del:?}");
}

/// GC by ours (bridge and portmap, as libcni sends it after its DELs) removes the
/// reference's chains of the attachments no longer valid, of this network only.
#[test]
fn gc_by_ours_removes_the_reference_chains_of_stale_attachments_only() {
    let node = Node::new(3);
    node.add_admin_rules(1);
    let warm = node.attach(Impl::Go, 0, 18090, 80, None);
    node.detach(Impl::Go, 0, 18090, 80, &warm);
    let baseline = node.tables();

    let stale = node.attach(Impl::Go, 1, 18091, 80, None);
    let live = node.attach(Impl::Go, 2, 18092, 80, None);
    let _live_server = node.server(2, &v4_of(&live), 80);
    let with_both = node.tables();
    let stale_chains =
        [reference_chain("", node.container(1).name()), reference_chain("DN-", node.container(1).name())];
    let valid = json!([{"containerID": node.container(2).name(), "ifname": "eth0"}]);
    for plugin in ["bridge", "portmap"] {
        let mut conf = node.conf(plugin, 0, 0, None);
        conf["cniVersion"] = json!("1.1.0");
        conf["cni.dev/valid-attachments"] = valid.clone();
        let out = common::call(plugin, "GC", node.host(), None, &conf).run();
        ok(&out, plugin);
    }
    let after = node.tables();
    let left: Vec<&String> = after.iter().filter(|l| mentions(l, &stale_chains)).collect();
    assert!(left.is_empty(), "{left:#?}");
    let lost: Vec<&String> = with_both.difference(&after).filter(|l| !mentions(l, &stale_chains)).collect();
    assert!(lost.is_empty(), "GC took more than the stale attachment's chains: {lost:#?}");
    assert!(node.hostport_reaches(18092), "the live attachment's hostPort");

    // The firewall's rules name no owner: the DEL that libcni's GC runs first, with the
    // cached result, removes them (bridge's DEL also releases the address).
    node.detach(Impl::Ours, 1, 18091, 80, &stale);
    node.detach(Impl::Ours, 2, 18092, 80, &live);
    assert_eq!(node.tables(), baseline);
    assert_eq!(node.reservations(), Vec::<String>::new());
}

fn link_names(ns: &TestNetns) -> BTreeSet<String> {
    ns.netlink().unwrap().links().unwrap().into_iter().map(|l| l.name).collect()
}

/// ptp's `ipMasq` makes the same chain as bridge's in the reference: ours' ptp DEL
/// removes it too.
#[test]
fn ptp_masquerade_of_the_reference_is_removed_by_ours() {
    let node = Node::new(1);
    let conf = json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "ptp", "ipMasq": true,
        "ipam": {"type": "host-local", "dataDir": node.data_dir(),
                 "ranges": [[{"subnet": "10.93.1.0/24"}], [{"subnet": "fd93:2::/64"}]]}});
    let with_prev = |result: Value| {
        let mut c = conf.clone();
        c["prevResult"] = result;
        c
    };
    let go = |command: &str, conf: &Value| {
        PluginCall::from_host(
            Path::new(GO).join("ptp"),
            command,
            Path::new(GO),
            node.host(),
            Some(node.container(0)),
        )
        .config(conf)
        .run()
    };
    // Warm-up by the reference: what it leaves once its attachment is gone.
    let warm = go("ADD", &conf).json();
    ok(&go("DEL", &with_prev(warm)), "Go ptp");
    let baseline = node.tables();

    let result = go("ADD", &conf).json();
    let chain = reference_chain("", node.container(0).name());
    let made = node.tables();
    assert!(
        made.contains(&format!("v4 :{chain} -")) && made.contains(&format!("v6 :{chain} -")),
        "{made:#?}"
    );
    ok(&node.call(Impl::Ours, "ptp", "DEL", 0, &with_prev(result)).run(), "ptp");
    assert_eq!(node.tables(), baseline);
    assert_eq!(node.reservations(), Vec::<String>::new());
}
