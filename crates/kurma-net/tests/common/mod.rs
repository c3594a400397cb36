//! Shared setup of the kurma-net integration tests: a throwaway "host" network namespace
//! that the plugin containers treat as the host's (the machine's own is never touched),
//! a temporary state directory, and the test netplugin images.

#![allow(dead_code)] // each test binary uses a different part

pub mod images;
pub mod scripts;
pub mod servers;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_testkit::ns::TestNetns;
use kurma_net::{Host, HostOptions, NetworkConfig};
use serde_json::{json, Value};

use images::{Scripts, TestImage};

/// Prefix of every namespace, link, temp dir and container these tests make.
pub const PREFIX: &str = "kh";

/// Which image serves `mynet`. The shell netplugin (tests/common/scripts.rs) does real
/// bridge + address work; once the repository's `cni-netplugin` image is available, this
/// is the one line to switch (see [`MynetImage::CniNetplugin`]).
pub const MYNET_IMAGE: MynetImage = MynetImage::Shell;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MynetImage {
    Shell,
    /// `tools/build-netplugin-images OUTDIR` → OUTDIR/{cni,lo}-netplugin.{aci,oci.tar}.
    CniNetplugin,
}

/// Image files of the test netplugins, in both formats.
pub struct ImageFiles {
    pub dir: PathBuf,
    pub lo: TestImage,
    pub shell: TestImage,
}

impl ImageFiles {
    /// Builds `lo.aci`, `lo.oci.tar`, `mynet.aci`, `mynet.oci.tar` in `dir`.
    pub fn build(dir: &Path) -> ImageFiles {
        std::fs::create_dir_all(dir).unwrap();
        let lo = TestImage::build(
            &dir.join("lo-src"),
            &Scripts {
                setup: scripts::LO_SETUP.into(),
                add: scripts::LO_ADD.into(),
                del: scripts::LO_DEL.into(),
            },
        );
        let shell = TestImage::build(
            &dir.join("shell-src"),
            &Scripts { setup: scripts::shell_setup(), add: scripts::shell_add(), del: scripts::shell_del() },
        );
        lo.write_aci(&dir.join("lo.aci"), "kh/lo-netplugin");
        lo.write_oci(&dir.join("lo.oci.tar"));
        shell.write_aci(&dir.join("shell.aci"), "kh/shell-netplugin");
        shell.write_oci(&dir.join("shell.oci.tar"));
        match MYNET_IMAGE {
            MynetImage::Shell => {
                for ext in ["aci", "oci.tar"] {
                    std::fs::copy(dir.join(format!("lo.{ext}")), dir.join(format!("lo-net.{ext}"))).unwrap();
                    std::fs::copy(dir.join(format!("shell.{ext}")), dir.join(format!("mynet.{ext}")))
                        .unwrap();
                }
            }
            MynetImage::CniNetplugin => {
                let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/build-netplugin-images");
                let out = dir.join("built");
                let status = std::process::Command::new(tool).arg(&out).status().unwrap();
                assert!(status.success(), "tools/build-netplugin-images failed");
                for ext in ["aci", "oci.tar"] {
                    std::fs::copy(out.join(format!("lo-netplugin.{ext}")), dir.join(format!("lo-net.{ext}")))
                        .unwrap();
                    std::fs::copy(out.join(format!("cni-netplugin.{ext}")), dir.join(format!("mynet.{ext}")))
                        .unwrap();
                }
            }
        }
        ImageFiles { dir: dir.to_path_buf(), lo, shell }
    }

    pub fn file_uri(&self, name: &str) -> String {
        format!("file://{}", self.dir.join(name).display())
    }
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
        "type": "bridge", "bridge": bridge, "isGateway": true,
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
        let tmp = tempfile::Builder::new().prefix("kh-").tempdir().unwrap();
        let host_ns = TestNetns::with_prefix(PREFIX).unwrap();
        let mut options = HostOptions::new(tmp.path().join("state"));
        options.host_netns = Some(host_ns.path().to_path_buf());
        // Unique per test: the runtime's root is per state dir, but names show up in `ps`.
        options.container_prefix = format!("{PREFIX}-{}", host_ns.name().trim_start_matches("kh-"));
        Bed { tmp, host_ns, options }
    }

    pub fn host(&self, config: &Value) -> Host {
        Host::new(NetworkConfig::from_value(config).unwrap(), self.options.clone()).unwrap()
    }

    pub fn with_limit(mut self, limit: Duration) -> Bed {
        self.options.limit = limit;
        self
    }

    /// Interface names in the host namespace.
    pub fn host_links(&self) -> Vec<String> {
        links_of(&self.host_ns)
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
pub fn reservations(host: &Host, network: &str) -> Vec<String> {
    let dir = match MYNET_IMAGE {
        MynetImage::Shell => host.plugin_rootfs(network).join("var/lib/kh-ipam"),
        MynetImage::CniNetplugin => host.plugin_rootfs(network).join("var/lib/cni/networks").join(network),
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
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
