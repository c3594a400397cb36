//! Test netplugin images, written with the image side's own writers
//! (`kurma_model::image`): the shell netplugins (busybox plus three scripts) for the
//! failure cases, and the real `cni-netplugin` / `lo-netplugin` built from the workspace's
//! debug binaries (with the host's shared libraries, see `build::Inputs::host_libraries`).

use std::path::{Path, PathBuf};
use std::process::Command;

use cni_testkit::binaries::workspace_binary;
use kurma_model::image::build::{self, Inputs};
use kurma_model::image::oci::{self, ImageSpec};
use kurma_model::image::{aci, tree::Tree};

pub const BUSYBOX: &str = "/bin/busybox";
const APPLETS: &[&str] =
    &["sh", "ip", "nsenter", "cat", "sed", "sleep", "mkdir", "rm", "md5sum", "cut", "echo"];

/// Test images are large (debug binaries) and thrown away: compress them fast.
const TEST_GZIP_LEVEL: u32 = 1;

/// The three executables of a netplugin.
pub struct Scripts {
    pub setup: String,
    pub add: String,
    pub del: String,
}

/// The root filesystem of a shell netplugin.
pub fn shell_rootfs(scripts: &Scripts) -> Tree {
    assert!(Path::new(BUSYBOX).is_file(), "{BUSYBOX} is missing: install Debian's busybox-static");
    let mut tree = Tree::new();
    for dir in ["proc", "dev", "sys", "tmp", "run/netns", "var/lib"] {
        tree.dir(dir, 0o755);
    }
    tree.file("bin/busybox", 0o755, std::fs::read(BUSYBOX).unwrap());
    for applet in APPLETS {
        tree.symlink(&format!("bin/{applet}"), "busybox");
    }
    for (name, text) in [("setup", &scripts.setup), ("add", &scripts.add), ("del", &scripts.del)] {
        tree.file(&format!("opt/network/{name}"), 0o755, text.as_bytes());
    }
    tree
}

/// Writes `rootfs` as `<stem>.aci` and `<stem>.oci.tar` in `dir`.
pub fn write_both(dir: &Path, stem: &str, name: &str, rootfs: &Tree) -> oci::Blobs {
    let manifest = aci::manifest(name, &[("os", "linux"), ("arch", "amd64")], &["/opt/network/setup"]);
    let mut file = std::fs::File::create(dir.join(format!("{stem}.aci"))).unwrap();
    aci::write(&manifest, rootfs, 0, &mut file).unwrap();
    let spec = ImageSpec {
        tag: "latest",
        entrypoint: &["/opt/network/setup"],
        labels: &[],
        gzip_level: TEST_GZIP_LEVEL,
    };
    let file = std::fs::File::create(dir.join(format!("{stem}.oci.tar"))).unwrap();
    oci::write_archive(&spec, rootfs, 0, std::io::BufWriter::new(file)).unwrap()
}

/// Builds the repository's `cni-netplugin` and `lo-netplugin` (both formats) into `out`
/// with the library's own image builder, from the workspace's debug `cni-plugins` and
/// `kurma-netplugin` (and `dhcp`, a plugin binary of its own) plus the shared libraries and
/// loader they need. No release build.
pub fn build_real_netplugins(out: &Path) {
    let plugins = workspace_binary("cni-plugins", "cni-plugins");
    let netplugin = workspace_binary("kurma-netplugin", "kurma-netplugin");
    let listed = Command::new(&plugins).arg("--list").output().expect("cni-plugins --list");
    let names: Vec<String> = String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect();
    assert!(names.iter().any(|n| n == "bridge") && names.iter().any(|n| n == "host-local"), "{names:?}");
    let dhcp = workspace_binary("cni-dhcp", "dhcp");
    let libraries: Vec<PathBuf> = build::host_libraries(&[&plugins, &netplugin, &dhcp]).unwrap();
    assert!(
        libraries.iter().any(|l| l.to_string_lossy().contains("ld-linux")),
        "ldd found no dynamic loader for the debug binaries: {libraries:?}"
    );
    let (cni_plugins, netplugin) = (without_debug_info(&plugins), without_debug_info(&netplugin));
    let dhcp = without_debug_info(&dhcp);
    let inputs = Inputs {
        cni_plugins: &cni_plugins,
        netplugin: &netplugin,
        plugin_names: &names,
        own_binaries: &[("dhcp", &dhcp)],
        version: "0.0.0-test",
        mtime: 0,
        gzip_level: TEST_GZIP_LEVEL,
        host_libraries: &libraries,
    };
    build::write_all(&inputs, out).unwrap();
}

/// A binary's bytes without its debug information (`objcopy --strip-debug`, binutils comes
/// with the toolchain's linker): a quarter of the size, so the test images build, unpack
/// and push in seconds. The code is the same.
fn without_debug_info(binary: &Path) -> Vec<u8> {
    let out = tempfile::Builder::new().prefix("kh-strip-").tempdir().unwrap();
    let stripped = out.path().join("binary");
    let status = Command::new("objcopy").arg("--strip-debug").arg(binary).arg(&stripped).status().unwrap();
    assert!(status.success(), "objcopy --strip-debug {} failed", binary.display());
    std::fs::read(stripped).unwrap()
}
