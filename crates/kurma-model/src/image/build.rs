//! The netplugin images of this repository.
//!
//! Both are an empty base with only our two static binaries and the directories they and
//! a runtime need:
//!
//! ```text
//! opt/cni/bin/cni-plugins          the multi-call CNI plugin binary
//! opt/cni/bin/<plugin> -> cni-plugins   one link per plugin (lo-netplugin: loopback only)
//! opt/network/kurma-netplugin      the netplugin binary
//! opt/network/{setup,add,del} -> kurma-netplugin
//! opt/network/defaults.json        lo-netplugin only: {"type":"loopback"}
//! dev/ proc/ sys/ run/ tmp/ var/lib/kurma-netplugin/   mount points and state
//! ```
//!
//! The container's command is `/opt/network/kurma-netplugin pause`.

use super::oci::ImageSpec;
use super::tree::Tree;
use super::{aci, oci, sha256_hex};
use std::path::{Path, PathBuf};

/// The command the plugin container runs (it waits for SIGTERM).
pub const COMMAND: [&str; 2] = ["/opt/network/kurma-netplugin", "pause"];

/// What goes into the images.
pub struct Inputs<'a> {
    /// The static `cni-plugins` binary's bytes.
    pub cni_plugins: &'a [u8],
    /// The static `kurma-netplugin` binary's bytes.
    pub netplugin: &'a [u8],
    /// Every plugin name `cni-plugins` answers to (`cni-plugins --list`).
    pub plugin_names: &'a [String],
    /// Plugins built as binaries of their own, outside the multi-call one (`dhcp`,
    /// `etcd-ipam`): name and static binary's bytes. They go into `cni-netplugin`.
    pub own_binaries: &'a [(&'a str, &'a [u8])],
    /// The version label and tag.
    pub version: &'a str,
    /// The mtime of every file.
    pub mtime: u64,
    /// The OCI layer's gzip level ([`super::oci::GZIP_BEST`] for shipped images).
    pub gzip_level: u32,
    /// Test-only: host files copied into the rootfs under their own paths, so that
    /// dynamically linked (debug) binaries run in the image: the shared libraries they
    /// need and the dynamic loader ([`host_libraries`] lists them). Shipped images leave
    /// this empty: their binaries are static and the base is empty.
    pub host_libraries: &'a [PathBuf],
}

/// Test-only (see [`Inputs::host_libraries`]): the shared libraries and the dynamic
/// loader `binaries` need, as `ldd` resolves them on this host; empty for static ones.
pub fn host_libraries(binaries: &[&Path]) -> std::io::Result<Vec<PathBuf>> {
    let mut found = std::collections::BTreeSet::new();
    for binary in binaries {
        let out = std::process::Command::new("ldd").arg(binary).output()?;
        // `ldd` exits 1 for a static binary ("not a dynamic executable").
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"; "linux-vdso.so.1 (0x...)" has no file.
            let path = line.split("=>").last().unwrap_or_default().trim();
            let path = path.split(" (").next().unwrap_or_default().trim();
            if path.starts_with('/') {
                found.insert(PathBuf::from(path));
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// One image to build.
pub struct Netplugin {
    /// `cni-netplugin` or `lo-netplugin`: the file names and the image name's last part.
    pub name: &'static str,
    pub rootfs: Tree,
}

/// The ACI name prefix of our images.
pub const NAME_PREFIX: &str = "cni-rs/";

/// The rootfs of a netplugin image with the plugin links `plugins`.
pub fn rootfs(inputs: &Inputs, plugins: &[&str], defaults: Option<&str>) -> std::io::Result<Tree> {
    let mut tree = Tree::new();
    for library in inputs.host_libraries {
        // Read through symbolic links: the image gets the file under the path asked for.
        tree.file(&library.to_string_lossy(), 0o755, std::fs::read(library)?);
    }
    for dir in ["dev", "proc", "sys", "run", "var/lib/kurma-netplugin"] {
        tree.dir(dir, 0o755);
    }
    tree.dir("tmp", 0o1777);
    tree.file("opt/cni/bin/cni-plugins", 0o755, inputs.cni_plugins);
    for plugin in plugins {
        match inputs.own_binaries.iter().find(|(name, _)| name == plugin) {
            Some((_, bytes)) => tree.file(&format!("opt/cni/bin/{plugin}"), 0o755, *bytes),
            None => tree.symlink(&format!("opt/cni/bin/{plugin}"), "cni-plugins"),
        };
    }
    tree.file("opt/network/kurma-netplugin", 0o755, inputs.netplugin);
    for verb in ["setup", "add", "del"] {
        tree.symlink(&format!("opt/network/{verb}"), "kurma-netplugin");
    }
    if let Some(defaults) = defaults {
        tree.file("opt/network/defaults.json", 0o644, defaults);
    }
    Ok(tree)
}

/// `cni-netplugin` (every plugin) and `lo-netplugin` (loopback only).
pub fn netplugins(inputs: &Inputs) -> std::io::Result<Vec<Netplugin>> {
    let multi_call = inputs.plugin_names.iter().map(String::as_str);
    let all: Vec<&str> = multi_call.chain(inputs.own_binaries.iter().map(|(name, _)| *name)).collect();
    Ok(vec![
        Netplugin { name: "cni-netplugin", rootfs: rootfs(inputs, &all, None)? },
        Netplugin {
            name: "lo-netplugin",
            rootfs: rootfs(inputs, &["loopback"], Some("{\"type\":\"loopback\"}\n"))?,
        },
    ])
}

/// One file written, with its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub sha256: String,
}

/// Writes `<name>.aci` and `<name>.oci.tar` of every netplugin into `out`, and
/// `SHA256SUMS` listing them.
pub fn write_all(inputs: &Inputs, out: &Path) -> std::io::Result<Vec<Written>> {
    std::fs::create_dir_all(out)?;
    let labels = [("version", inputs.version), ("os", "linux"), ("arch", "amd64")];
    let mut written = Vec::new();
    for plugin in netplugins(inputs)? {
        let name = format!("{NAME_PREFIX}{}", plugin.name);
        let manifest = aci::manifest(&name, &labels, &COMMAND);
        let mut aci_bytes = Vec::new();
        aci::write(&manifest, &plugin.rootfs, inputs.mtime, &mut aci_bytes)?;
        written.push(write_file(&out.join(format!("{}.aci", plugin.name)), &aci_bytes)?);
        let oci_labels = [
            ("org.opencontainers.image.title", name.as_str()),
            ("org.opencontainers.image.version", inputs.version),
        ];
        let spec = ImageSpec {
            tag: "latest",
            entrypoint: &COMMAND,
            labels: &oci_labels,
            gzip_level: inputs.gzip_level,
        };
        let mut oci_bytes = Vec::new();
        oci::write_archive(&spec, &plugin.rootfs, inputs.mtime, &mut oci_bytes)?;
        written.push(write_file(&out.join(format!("{}.oci.tar", plugin.name)), &oci_bytes)?);
    }
    let sums: String = written
        .iter()
        .map(|w| format!("{}  {}\n", w.sha256, w.path.file_name().unwrap_or_default().to_string_lossy()))
        .collect();
    std::fs::write(out.join("SHA256SUMS"), sums)?;
    Ok(written)
}

fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<Written> {
    let temp = path.with_extension("partial");
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)?;
    Ok(Written { path: path.to_path_buf(), sha256: sha256_hex(bytes) })
}
