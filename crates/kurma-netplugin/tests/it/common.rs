//! Shared by the netplugin integration tests: the two images built from this workspace's
//! binaries and unpacked, and a way to run their executables as the host daemon would
//! (configuration on stdin, the seed's arguments), inside a test's "host" namespace.

use cni_testkit::binaries::workspace_binary;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{run_within, DEFAULT_LIMIT};
use kurma_model::image::aci;
use kurma_model::image::build::{netplugins, write_all, Inputs, Written, COMMAND};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Name prefix of everything these tests create (namespaces, bridges, temp dirs).
pub const PREFIX: &str = "kn";

/// The images' inputs from the test profile's binaries: (cni-plugins, kurma-netplugin,
/// plugin names); the plugins with binaries of their own come from [`dhcp`].
pub fn inputs() -> (Vec<u8>, Vec<u8>, Vec<String>) {
    let plugins = workspace_binary("cni-plugins", "cni-plugins");
    let netplugin = PathBuf::from(env!("CARGO_BIN_EXE_kurma-netplugin"));
    let listed = Command::new(&plugins).arg("--list").output().expect("cni-plugins --list");
    let names: Vec<String> = String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect();
    assert!(names.len() > 10, "cni-plugins --list printed {names:?}");
    (std::fs::read(plugins).unwrap(), std::fs::read(netplugin).unwrap(), names)
}

/// The test profile's `dhcp` (a plugin binary of its own, with its daemon).
pub fn dhcp() -> Vec<u8> {
    std::fs::read(workspace_binary("cni-dhcp", "dhcp")).unwrap()
}

/// The build's inputs, with the test's fixed version and mtime.
fn image_inputs<'a>(
    plugins: &'a [u8],
    netplugin: &'a [u8],
    names: &'a [String],
    own_binaries: &'a [(&'a str, &'a [u8])],
) -> Inputs<'a> {
    Inputs {
        cni_plugins: plugins,
        netplugin,
        plugin_names: names,
        own_binaries,
        version: "0.1.0",
        mtime: 0,
        gzip_level: kurma_model::image::oci::GZIP_BEST,
        host_libraries: &[],
    }
}

/// Builds both images, both formats, into `out`, with the real plugin names but small
/// stand-ins for the two binaries (the test binaries are ~80 MB with debug information;
/// the executables tests run the real ones from unpacked images).
pub fn build_images(out: &Path) -> Vec<Written> {
    let (_, _, names) = inputs();
    let (plugins, netplugin) =
        (b"\x7fELF cni-plugins stand-in".to_vec(), b"\x7fELF kurma-netplugin stand-in".to_vec());
    let dhcp = b"\x7fELF dhcp stand-in".to_vec();
    let own: [(&str, &[u8]); 1] = [("dhcp", &dhcp)];
    let inputs = image_inputs(&plugins, &netplugin, &names, &own);
    write_all(&inputs, out).expect("writing the images")
}

/// An unpacked netplugin image and the state directory its executables use.
pub struct Plugin {
    pub rootfs: PathBuf,
    pub state: PathBuf,
    /// The CNI_PATH the executables get: the image's plugin directory, and any a test adds.
    pub cni_path: String,
    /// More variables for the executables.
    pub env: Vec<(String, String)>,
}

/// Both images, built and unpacked once per test into a temp dir.
pub struct Images {
    pub dir: tempfile::TempDir,
    pub cni: Plugin,
    pub lo: Plugin,
}

impl Images {
    /// Both images written as ACIs (the uncompressed format: the test binaries are large)
    /// and unpacked with the reader the host side uses.
    pub fn new() -> Images {
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir().unwrap();
        let (plugins, netplugin, names) = inputs();
        let dhcp = dhcp();
        let own: [(&str, &[u8]); 1] = [("dhcp", &dhcp)];
        let inputs = image_inputs(&plugins, &netplugin, &names, &own);
        let mut unpacked = Vec::new();
        for image in netplugins(&inputs).unwrap() {
            let manifest = aci::manifest(image.name, &[], &COMMAND);
            let mut bytes = Vec::new();
            aci::write(&manifest, &image.rootfs, 0, &mut bytes).unwrap();
            let target = dir.path().join(image.name);
            aci::unpack(bytes.as_slice(), &target).unwrap();
            let cni_path = target.join("rootfs/opt/cni/bin").display().to_string();
            let (rootfs, state) = (target.join("rootfs"), target.join("state"));
            unpacked.push(Plugin { rootfs, state, cni_path, env: Vec::new() });
        }
        let lo = unpacked.pop().unwrap();
        let cni = unpacked.pop().unwrap();
        Images { dir, cni, lo }
    }
}

/// What an executable printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts success and returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.status, 0, "expected success: {self:?}");
        &self.stdout
    }
}

impl Plugin {
    /// Runs `/opt/network/<verb>` of the unpacked image inside `host`, with `entry` on
    /// stdin. The image's paths are reached through the variables the executables read.
    pub fn run(&self, host: &TestNetns, verb: &str, args: &[&str], entry: &Value) -> Run {
        let mut command = host.command(self.rootfs.join("opt/network").join(verb));
        command
            .args(args)
            .env_clear()
            .env("CNI_PATH", &self.cni_path)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KURMA_NETPLUGIN_STATE_DIR", &self.state)
            .env("KURMA_NETPLUGIN_DEFAULTS", self.rootfs.join("opt/network/defaults.json"));
        // An executable refusing its arguments exits before reading stdin: that is its
        // business, judged by what it printed.
        let entry = serde_json::to_vec(entry).unwrap();
        let out = run_within(&mut command, &entry, DEFAULT_LIMIT, format_args!("/opt/network/{verb}"));
        Run {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The cached results (one per attachment) in the state directory.
    pub fn cached_results(&self) -> Vec<String> {
        match std::fs::read_dir(self.state.join("cni/results")) {
            Ok(dir) => {
                dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
            }
            Err(_) => Vec::new(),
        }
    }
}
