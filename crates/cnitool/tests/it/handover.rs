//! Rolling a node back to the Go reference plugins (Debian's containernetworking-plugins
//! in /usr/lib/cni) while containers started by ours run: a Kubernetes-style chain
//! (bridge with `ipMasq` and host-local, portmap with hostPorts, firewall with no backend
//! named, tuning) attached by ours through cnitool, `cnitool handover`, then the Go
//! plugins' CHECK and DEL through cnitool. The host namespace must end exactly as after a
//! warm-up container of each implementation (iptables-save, the nftables ruleset, links,
//! addresses, host-local's reservations, libcni's cache), and host ports and masquerading
//! keep working after the hand-over, now through the reference's rules alone.

use crate::support::ok;
use cni_testkit::binaries::{installed_plugins, workspace_binary};
use cni_testkit::ns::TestNetns;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, EchoServer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");
const GO: &str = "/usr/lib/cni";
const NETWORK: &str = "debk8s";
const HOST_OUTSIDE: &str = "192.168.94.1";

struct Node {
    host: TestNetns,
    outside: TestNetns,
    containers: Vec<TestNetns>,
    dir: tempfile::TempDir,
    ours: PathBuf,
}

impl Node {
    fn new(containers: usize) -> Node {
        for plugin in ["bridge", "host-local", "portmap", "firewall", "tuning"] {
            assert!(
                Path::new(GO).join(plugin).exists(),
                "{GO}/{plugin} missing: install containernetworking-plugins"
            );
        }
        let host = TestNetns::with_prefix("deb").unwrap();
        let outside = TestNetns::with_prefix("deb").unwrap();
        let containers = (0..containers).map(|_| TestNetns::with_prefix("deb").unwrap()).collect();
        // A link to a namespace outside the host: replies reach it only if the host
        // masquerades, and its connections to the host's address come in through
        // PREROUTING as a remote client's do.
        let sh = |ns: &TestNetns, script: &str| {
            let out = ns.command("sh").arg("-ec").arg(script).output().unwrap();
            assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let peer = outside.path().display().to_string();
        sh(&host, &format!("ip link add debo0 type veth peer name debo1 netns {peer}"));
        sh(&host, &format!("ip addr add {HOST_OUTSIDE}/24 dev debo0 && ip link set debo0 up"));
        sh(&outside, "ip addr add 192.168.94.2/24 dev debo1 && ip link set debo1 up && ip link set lo up");
        let dir = tempfile::Builder::new().prefix("deb-handover").tempdir().unwrap();
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let ours = installed_plugins(&workspace_binary("cni-plugins", "cni-plugins"), &root);
        std::fs::create_dir(dir.path().join("net.d")).unwrap();
        let conflist = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [
            {"type": "bridge", "bridge": "debbr8", "isGateway": true, "ipMasq": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": dir.path().join("ipam"),
                      "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                      "ranges": [[{"subnet": "10.94.0.0/24"}], [{"subnet": "fd94:1::/64"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall"},
            {"type": "tuning"}]});
        std::fs::write(dir.path().join("net.d/10-k8s.conflist"), conflist.to_string()).unwrap();
        Node { host, outside, containers, dir, ours }
    }

    fn netns(&self, i: usize) -> String {
        self.containers[i].path().display().to_string()
    }

    /// cnitool in the host namespace with `cni_path` as the plugins.
    fn cnitool(&self, cni_path: &Path, args: &[&str], cap_args: Option<Value>) -> Output {
        let mut cmd = self.host.command(CNITOOL);
        cmd.env_remove("CNI_ARGS")
            .env_remove("CNI_IFNAME")
            .env("NETCONFPATH", self.dir.path().join("net.d"))
            .env("CNI_PATH", cni_path)
            .env("CNI_CACHE_DIR", self.dir.path().join("cache"))
            .env("CAP_ARGS", cap_args.map(|v| v.to_string()).unwrap_or_default())
            .args(args);
        cmd.output().unwrap()
    }

    /// ADD, or another verb, with the port mapping in CAP_ARGS as a runtime gives it on
    /// every verb (the reference's portmap DEL does nothing without it).
    fn run(&self, cni_path: &Path, verb: &str, i: usize, host_port: u16) -> String {
        let cap = json!({"portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]});
        ok(self.cnitool(cni_path, &[verb, NETWORK, &self.netns(i)], Some(cap)))
    }

    fn add(&self, cni_path: &Path, i: usize, host_port: u16) -> Value {
        serde_json::from_str(&self.run(cni_path, "add", i, host_port)).unwrap()
    }

    /// The host's state the test compares: both families' iptables, the nftables
    /// ruleset, links and addresses, host-local's files, the cache.
    fn snapshot(&self) -> String {
        let run = |ns: &TestNetns, program: &str, args: &[&str]| {
            let out = ns.command(program).args(args).output().unwrap();
            assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        let mut out = String::new();
        for tool in ["iptables-save", "ip6tables-save"] {
            out.push_str(&format!("## {tool}\n"));
            for line in run(&self.host, tool, &[]).lines().filter(|l| !l.starts_with('#')) {
                // Chain policies' packet counters tick with traffic.
                let line = match line.split_once(" [") {
                    Some((head, _)) if line.starts_with(':') => head,
                    _ => line,
                };
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str("## nft\n");
        let ruleset = run(&self.host, "nft", &["list", "ruleset"]);
        for line in ruleset.lines() {
            // Counters tick with traffic too.
            let line = match line.find(" counter packets") {
                Some(at) => &line[..at],
                None => line,
            };
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("## links\n");
        for link in self.host.ip_json(&["link", "show"]).as_array().unwrap() {
            // The flags the links were set to. Carrier ones follow by themselves, later:
            // a bridge whose last port went is NO-CARRIER only once the kernel's link
            // watcher has run (up to a second), so a snapshot taken at once may or may not
            // show it.
            let carrier = ["LOWER_UP", "NO-CARRIER", "DORMANT", "M-DOWN"];
            let flags: Vec<&str> = link["flags"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f.as_str())
                .filter(|f| !carrier.contains(f))
                .collect();
            out.push_str(&format!("{} {flags:?}\n", link["ifname"]));
        }
        out.push_str("## addresses\n");
        for link in self.host.ip_json(&["addr", "show"]).as_array().unwrap() {
            for a in link["addr_info"].as_array().unwrap() {
                out.push_str(&format!("{} {}/{}\n", link["ifname"], a["local"], a["prefixlen"]));
            }
        }
        for dir in ["ipam", "cache"] {
            out.push_str(&format!("## {dir}\n"));
            out.push_str(&files(&self.dir.path().join(dir)).join("\n"));
            out.push('\n');
        }
        out
    }

    fn server(&self, i: usize, addr: &str) -> EchoServer {
        tcp_echo_server(self.containers[i].netns(), addr.parse::<SocketAddr>().unwrap()).unwrap()
    }

    /// The container's hostPort from outside the host, and the container's egress to the
    /// outside namespace (which has no route back to the containers: masquerade).
    fn assert_traffic(&self, i: usize, host_port: u16, outside: &EchoServer, what: &str) {
        let to_host: SocketAddr = format!("{HOST_OUTSIDE}:{host_port}").parse().unwrap();
        tcp_echo(self.outside.netns(), to_host, what.as_bytes(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{what}: hostPort {host_port} of container {i}: {e}"));
        tcp_echo(self.containers[i].netns(), outside.local_addr(), what.as_bytes(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{what}: egress of container {i}: {e}"));
    }
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Root: containers started by ours are stopped by the Go plugins after `handover`.
#[test]
fn after_handover_the_go_plugins_stop_containers_ours_started() {
    let node = Node::new(3);
    let go = Path::new(GO);
    let ours = node.ours.clone();
    // Warm-up: a container of each implementation, added and deleted, so that what each
    // keeps for good (the reference's shared chains, our tables, the bridge) is in the
    // baseline.
    node.add(go, 2, 8099);
    node.run(go, "del", 2, 8099);
    node.add(&ours, 2, 8099);
    node.run(&ours, "del", 2, 8099);
    let baseline = node.snapshot();

    let outside =
        tcp_echo_server(node.outside.netns(), "192.168.94.2:0".parse::<SocketAddr>().unwrap()).unwrap();
    let ports = [8081, 8082];
    let mut servers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        node.add(&ours, i, *port);
        servers.push(node.server(i, "0.0.0.0:80"));
        node.assert_traffic(i, *port, &outside, "ours");
    }
    let before = node.snapshot();
    assert!(!before.contains("CNI-DN-"), "ours made no reference chains:\n{before}");

    // --dry-run prints the reference's rules and changes nothing.
    let dry = ok(node.cnitool(go, &["handover", "--to", "reference", "--dry-run"], None));
    assert!(
        dry.contains("# iptables-restore --noflush") && dry.contains("-j DNAT --to-destination"),
        "{dry}"
    );
    assert!(dry.contains("# remove from inet cni_portmap"), "{dry}");
    assert_eq!(node.snapshot(), before, "--dry-run changed the host");

    ok(node.cnitool(go, &["handover"], None));
    let handed = node.snapshot();
    for i in 0..2 {
        let id = format!("cnitool-{}", &sha512_hex(&node.netns(i))[..20]);
        assert!(handed.contains(&format!("id: \\\"{id}\\\"")), "no reference rules of {id}:\n{handed}");
    }
    assert!(!handed.contains("chain cni-"), "our attachment chains are gone:\n{handed}");
    // Again: nothing changes.
    ok(node.cnitool(go, &["handover"], None));
    assert_eq!(node.snapshot(), handed, "a second handover changed the host");

    // Host ports and masquerading now work through the reference's rules alone.
    for (i, port) in ports.iter().enumerate() {
        node.assert_traffic(i, *port, &outside, "after handover");
    }
    // The reference's CHECK accepts what it finds (but for one fault of its own: 1.1.1's
    // portmap compares a dual-stack container's IPv4 rules with the ip6tables chain, and
    // fails so on the containers it made itself), and its DEL succeeds.
    for (i, port) in ports.iter().enumerate() {
        let cap = json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]});
        let out = node.cnitool(go, &["check", NETWORK, &node.netns(i)], Some(cap));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("could not check ipv6 dnat: rule [[-p tcp --dport"),
            "the reference's CHECK: {stderr}"
        );
        assert!(!stderr.contains("bridge") && !stderr.contains("firewall"), "{stderr}");
    }
    drop(servers);
    for (i, port) in ports.iter().enumerate() {
        node.run(go, "del", i, *port);
    }
    assert_eq!(node.snapshot(), baseline, "the Go plugins' DEL after handover left the host changed");
}

fn sha512_hex(text: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("printf %s '{text}' | sha512sum")).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..128].to_string()
}
