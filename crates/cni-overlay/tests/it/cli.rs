//! The agent's refusals: bad flags name the flag (exit 2); an unreachable etcd is a clear
//! error and leaves the node's network untouched (no device, no subnet file).

use std::path::{Path, PathBuf};
use std::process::Command;

use cni_testkit::etcd::{HostileMember, Hostility};
use cni_testkit::ns::TestNetns;
use tempfile::TempDir;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cni-overlay-agent"))
}

/// A node for one agent run that must fail: a host namespace and a directory for its
/// subnet file, named with `prefix`.
struct Node {
    host: TestNetns,
    dir: TempDir,
    name: String,
}

impl Node {
    fn new(prefix: &str) -> Node {
        Node {
            host: TestNetns::with_prefix(&format!("{prefix}cli")).unwrap(),
            dir: tempfile::Builder::new().prefix(&format!("{prefix}-cli-")).tempdir().unwrap(),
            name: format!("{prefix}-cli"),
        }
    }

    /// The agent against `endpoint` on the namespace's `lo`, with this node's name, netns
    /// and subnet file; the test adds its own flags.
    fn agent(&self, endpoint: &str) -> Command {
        let mut command = agent();
        command
            .args(["--etcd-endpoints", endpoint, "--iface", "lo", "--node", &self.name, "--netns"])
            .arg(self.host.path())
            .arg("--subnet-file")
            .arg(self.subnet_file());
        command
    }

    fn subnet_file(&self) -> PathBuf {
        self.dir.path().join("subnet.env")
    }

    fn has_link(&self, name: &str) -> bool {
        self.host.netlink().unwrap().link_by_name(name).unwrap().is_some()
    }
}

/// An etcd endpoint nobody listens on: the kernel's pick of a port, released at once.
fn unreachable_endpoint() -> String {
    format!("http://127.0.0.1:{}", cni_testkit::etcd::free_port())
}

#[test]
fn the_agent_keeps_the_command_line_conventions() {
    let binary = Path::new(env!("CARGO_BIN_EXE_cni-overlay-agent"));
    cni_testkit::cli::assert_conventions(binary, &[], "cni-overlay-agent");
}

#[test]
fn bad_flags_are_refused_naming_the_flag() {
    let out = agent().args(["--iface", "eth0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("required") && stderr.contains("--etcd-endpoints"), "{stderr}");
    let out = agent()
        .args([
            "--etcd-endpoints",
            "http://127.0.0.1:1",
            "--iface",
            "eth0",
            "--node",
            "n",
            "--subnet-len",
            "40",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--subnet-len 40"), "{out:?}");
}

#[test]
fn unreachable_etcd_fails_clearly_and_changes_nothing() {
    let node = Node::new("ov");
    let out = node.agent(&unreachable_endpoint()).args(["--device", "ovvx0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("etcd unreachable"), "{stderr}");
    assert!(!node.has_link("ovvx0"), "a device was left behind");
    assert!(!node.subnet_file().exists(), "a subnet file was written");
}

/// A hostile etcd member (an answer claiming a 1e12-byte body) is a clear error naming the
/// limit, exit status 1: not an abort on a huge allocation, and nothing is changed.
#[test]
fn a_hostile_etcd_member_is_an_error_not_an_abort() {
    let node = Node::new("ot");
    let member = HostileMember::start(Hostility::ClaimsHugeMessage);
    let out = node.agent(&member.endpoint()).args(["--device", "otvx0"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "killed by a signal? {out:?}");
    assert!(stderr.contains("found 1000000000 bytes") && stderr.contains("over the 8 MiB limit"), "{stderr}");
    assert!(!node.has_link("otvx0"), "a device was left behind");
    assert!(!node.subnet_file().exists(), "a subnet file was written");
}

/// `--backend direct` can route a pod subnet only via a next hop of its family: with an
/// IPv6 pod network beside an IPv4 underlay the agent refuses to start (exit 1, naming the
/// flag and the way out) before it touches etcd or the node.
#[test]
fn direct_routing_of_a_family_the_underlay_lacks_is_refused() {
    let node = Node::new("or");
    let out = node
        .agent(&unreachable_endpoint())
        .args(["--backend", "direct", "--network6", "fd00:244::/48", "--device", "orvx0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("--backend direct needs every pod network of the underlay's family"), "{stderr}");
    assert!(stderr.contains("--backend auto"), "{stderr}");
    assert!(!stderr.contains("etcd unreachable"), "etcd was asked first: {stderr}");
    assert!(!node.subnet_file().exists(), "a subnet file was written");
}

/// `--backend wireguard` with a key file that is not the node's alone (a mode others can
/// read) or not a key: exit 1 naming `--wg-key-file` and the reason, before etcd or the
/// node is touched (no device, no subnet file), and the file left for the operator. On a
/// kernel without WireGuard (this machine's) a good key file gets as far as the kernel,
/// which is named in the error.
#[test]
fn wireguard_refuses_a_key_file_others_can_read_and_a_kernel_without_it() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new("wg");
    let key_file = node.dir.path().join("wireguard.key");
    let endpoint = unreachable_endpoint();
    let run = || {
        let out = node
            .agent(&endpoint)
            .args(["--backend", "wireguard", "--device", "wgcli0", "--wg-key-file"])
            .arg(&key_file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(!node.subnet_file().exists(), "a subnet file was written");
        assert!(!node.has_link("wgcli0"), "a device was made");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let key = format!("{}\n", cni_net::wireguard::base64(&[0x42; 32]));
    std::fs::write(&key_file, &key).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stderr = run();
    assert!(stderr.contains("--wg-key-file") && stderr.contains("others can read or write"), "{stderr}");
    std::fs::write(&key_file, "not a key\n").unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stderr = run();
    assert!(stderr.contains("--wg-key-file") && stderr.contains("delete the file"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), "not a key\n", "the damaged key was replaced");
    if cni_net::wireguard::WireGuard::new().is_err() {
        std::fs::write(&key_file, &key).unwrap();
        let stderr = run();
        assert!(stderr.contains("wireguard"), "{stderr}");
        assert!(!stderr.contains("etcd unreachable"), "etcd was asked first: {stderr}");
    }
}
