//! Shared setup of the kurma-net integration tests: a throwaway "host" network namespace
//! that the plugin containers treat as the host's (the machine's own is never touched),
//! a temporary state directory, and the test netplugin images.

pub mod hostile;
pub mod images;
pub mod scripts;
pub mod servers;
pub mod tls;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_testkit::ns::TestNetns;
use kurma_net::{Host, HostOptions, NetworkConfig};
use serde_json::{json, Value};

use images::Scripts;

/// Prefix of every namespace, link, temp dir and container these tests make.
pub const PREFIX: &str = "kh";

/// Image files of the test netplugins, in both formats: `lo-net.*` and `mynet.*` are the
/// repository's real `lo-netplugin` and `cni-netplugin`; `shell.*` is the
/// shell netplugin (tests/it/common/scripts.rs) for the failure cases a real plugin cannot
/// be made to show (sleeping past the limit, exit 3 with stderr, a probe counting setups).
pub struct ImageFiles {
    pub dir: PathBuf,
    /// The hex digest of the shell image's OCI layer.
    pub shell_layer: String,
}

impl ImageFiles {
    /// Writes the shell images into `dir` and links the real ones (built once, see
    /// [`real_netplugins`]) next to them.
    pub fn build(dir: &Path) -> ImageFiles {
        std::fs::create_dir_all(dir).unwrap();
        let shell =
            Scripts { setup: scripts::shell_setup(), add: scripts::shell_add(), del: scripts::shell_del() };
        let blobs = images::write_both(dir, "shell", "kh/shell-netplugin", &images::shell_rootfs(&shell));
        let real = real_netplugins();
        for ext in ["aci", "oci.tar"] {
            std::os::unix::fs::symlink(
                real.join(format!("lo-netplugin.{ext}")),
                dir.join(format!("lo-net.{ext}")),
            )
            .unwrap();
            std::os::unix::fs::symlink(
                real.join(format!("cni-netplugin.{ext}")),
                dir.join(format!("mynet.{ext}")),
            )
            .unwrap();
        }
        ImageFiles { dir: dir.to_path_buf(), shell_layer: blobs.layer.0.digest.hex().to_string() }
    }

    pub fn file_uri(&self, name: &str) -> String {
        format!("file://{}", self.dir.join(name).display())
    }
}

/// The real netplugin images, built once per set of binaries into the target's test
/// directory (keyed by the binaries' size and mtime) and shared, read-only, by every test
/// of every binary: building them is the slow part (two images of ~100 MB debug binaries).
pub fn real_netplugins() -> PathBuf {
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    let netplugin = cni_testkit::binaries::workspace_binary("kurma-netplugin", "kurma-netplugin");
    let mut key = String::new();
    for binary in [&plugins, &netplugin] {
        let meta = std::fs::metadata(binary).unwrap();
        let mtime = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        key.push_str(&format!("{}-{mtime}-", meta.len()));
    }
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kh-netplugin-images");
    let dir = cache.join(key.trim_end_matches('-'));
    if dir.join("SHA256SUMS").is_file() {
        return dir;
    }
    std::fs::create_dir_all(&cache).unwrap();
    // One builder at a time (test processes run in parallel); the others wait and reuse.
    let lock = std::fs::File::create(cache.join("lock")).unwrap();
    lock.lock().unwrap();
    if !dir.join("SHA256SUMS").is_file() {
        // Built aside and renamed into place: a killed build leaves no half image.
        let partial = tempfile::Builder::new().prefix("kh-partial-").tempdir_in(&cache).unwrap();
        images::build_real_netplugins(partial.path());
        std::fs::rename(partial.path(), &dir).unwrap();
        // Images of binaries since rebuilt are never used again.
        for stale in std::fs::read_dir(&cache).unwrap().flatten().filter(|e| e.path().is_dir()) {
            if stale.path() != dir {
                let _ = std::fs::remove_dir_all(stale.path());
            }
        }
    }
    dir
}

/// The seed's `lo` + `mynet` configuration, with test-owned names and a /24 subnet.
pub fn lo_and_mynet(lo_uri: &str, mynet_uri: &str, bridge: &str, subnet_base: &str) -> Value {
    json!({ "container_networks": [
        { "name": "lo", "aci": lo_uri },
        mynet_entry("mynet", mynet_uri, bridge, subnet_base),
    ]})
}

pub fn mynet_entry(name: &str, uri: &str, bridge: &str, subnet_base: &str) -> Value {
    json!({
        "name": name, "aci": uri, "containerInterface": "eth{n}",
        "type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true,
        "ipam": { "type": "host-local", "subnet": format!("{subnet_base}.0/24"), "routes": [{ "dst": "0.0.0.0/0" }] },
    })
}

/// A host namespace, a state directory and options pointing at them.
pub struct Bed {
    pub tmp: tempfile::TempDir,
    pub host_ns: TestNetns,
    pub options: HostOptions,
}

impl Bed {
    pub fn new() -> Bed {
        Bed::with_prefix(PREFIX)
    }

    /// A bed whose namespace, temporary directory and container names start with `prefix`.
    pub fn with_prefix(prefix: &str) -> Bed {
        let tmp = tempfile::Builder::new().prefix(&format!("{prefix}-")).tempdir().unwrap();
        let host_ns = TestNetns::with_prefix(prefix).unwrap();
        let mut options = HostOptions::new(tmp.path().join("state"));
        options.host_netns = Some(host_ns.path().to_path_buf());
        // Unique per test: the runtime's root is per state dir, but names show up in `ps`.
        let unique = host_ns.name().trim_start_matches(&format!("{prefix}-")).to_string();
        options.container_prefix = format!("{prefix}-{unique}");
        Bed { tmp, host_ns, options }
    }

    pub fn host(&self, config: &Value) -> Host {
        Host::new(NetworkConfig::from_value(config).unwrap(), self.options.clone()).unwrap()
    }

    pub fn with_limit(mut self, limit: Duration) -> Bed {
        self.options.limit = limit;
        self
    }

    /// Interfaces in the host namespace other than bridges: the host ends of attachments.
    /// (A bridge is made by the first add and stays, as the bridge plugin leaves it.)
    pub fn host_links(&self) -> Vec<String> {
        let bridges = self.host_ns.ip_json(&["link", "show", "type", "bridge"]);
        let bridges: Vec<&str> =
            bridges.as_array().unwrap().iter().map(|l| l["ifname"].as_str().unwrap()).collect();
        links_of(&self.host_ns).into_iter().filter(|l| !bridges.contains(&l.as_str())).collect()
    }
}

impl Drop for Bed {
    /// Removes every container the test's runtime state knows, also after a failed test.
    fn drop(&mut self) {
        let root = self.options.state_dir.join("runtime");
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let _ = std::process::Command::new(&self.options.runtime)
                .arg("--root")
                .arg(&root)
                .args(["delete", "--force"])
                .arg(entry.file_name())
                .output();
        }
    }
}

pub fn links_of(ns: &TestNetns) -> Vec<String> {
    let links = ns.ip_json(&["link", "show"]);
    links.as_array().unwrap().iter().map(|l| l["ifname"].as_str().unwrap().to_string()).collect()
}

/// The IPv4 addresses (CIDR) on `ifname` in `ns`.
pub fn addresses_of(ns: &TestNetns, ifname: &str) -> Vec<String> {
    let addrs = ns.ip_json(&["-4", "addr", "show", "dev", ifname]);
    addrs.as_array().unwrap()[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// Address reservations the mynet plugin holds, read from its container's filesystem.
/// (host-local's store in the real image, the shell netplugin's in a shell one).
pub fn reservations(host: &Host, network: &str) -> Vec<String> {
    let rootfs = host.plugin_rootfs(network);
    let dirs = [rootfs.join("var/lib/cni/networks").join(network), rootfs.join("var/lib/kh-ipam")];
    let mut names: Vec<String> = dirs
        .iter()
        .flat_map(std::fs::read_dir)
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::Ipv4Addr>().is_ok())
        .collect();
    names.sort();
    names
}

/// How many times `setup` ran in the shell netplugin's container.
pub fn setup_runs(host: &Host, network: &str) -> usize {
    std::fs::read_to_string(host.plugin_rootfs(network).join("var/lib/kh/setups"))
        .unwrap_or_default()
        .lines()
        .count()
}
