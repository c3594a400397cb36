//! Test netplugin images: busybox plus three scripts, packed as an ACI and as an OCI
//! image archive (one uncompressed layer), with the same blobs a registry push uses.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const BUSYBOX: &str = "/bin/busybox";
const APPLETS: &[&str] =
    &["sh", "ip", "nsenter", "cat", "sed", "sleep", "mkdir", "rm", "md5sum", "cut", "echo"];

/// The three executables of a netplugin.
pub struct Scripts {
    pub setup: String,
    pub add: String,
    pub del: String,
}

/// An image's parts, ready to be packed in each format.
pub struct TestImage {
    /// The uncompressed layer tar (the root filesystem).
    pub layer: Vec<u8>,
    /// The OCI image config JSON.
    pub config: Vec<u8>,
    /// The OCI image manifest JSON.
    pub manifest: Vec<u8>,
    rootfs: PathBuf,
}

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

impl TestImage {
    /// Builds the root filesystem under `dir`.
    pub fn build(dir: &Path, scripts: &Scripts) -> TestImage {
        assert!(Path::new(BUSYBOX).is_file(), "{BUSYBOX} is missing: install Debian's busybox-static");
        let rootfs = dir.join("rootfs");
        for sub in ["bin", "opt/network", "proc", "dev", "sys", "tmp", "run/netns", "var/lib"] {
            fs::create_dir_all(rootfs.join(sub)).unwrap();
        }
        fs::copy(BUSYBOX, rootfs.join("bin/busybox")).unwrap();
        for applet in APPLETS {
            symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        for (name, text) in [("setup", &scripts.setup), ("add", &scripts.add), ("del", &scripts.del)] {
            let path = rootfs.join("opt/network").join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let layer = tar_of(&rootfs, "");
        let config = serde_json::to_vec(&json!({
            "architecture": kurma_net::image::host_architecture(), "os": "linux",
            "config": { "Env": ["PATH=/bin"] },
            "rootfs": { "type": "layers", "diff_ids": [sha256(&layer)] },
        }))
        .unwrap();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": { "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": sha256(&config), "size": config.len() },
            "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar",
                         "digest": sha256(&layer), "size": layer.len() }],
        }))
        .unwrap();
        TestImage { layer, config, manifest, rootfs }
    }

    /// Writes the ACI (`manifest` + `rootfs/`) to `path`.
    pub fn write_aci(&self, path: &Path, name: &str) {
        let stage = path.with_extension("aci-stage");
        fs::create_dir_all(&stage).unwrap();
        let manifest = json!({ "acKind": "ImageManifest", "acVersion": "0.8.11", "name": name });
        fs::write(stage.join("manifest"), manifest.to_string()).unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        builder.follow_symlinks(false);
        builder.append_path_with_name(stage.join("manifest"), "manifest").unwrap();
        builder.append_dir_all("rootfs", &self.rootfs).unwrap();
        fs::write(path, builder.into_inner().unwrap()).unwrap();
    }

    /// Writes the OCI image archive (a tar of an image layout) to `path`.
    pub fn write_oci(&self, path: &Path) {
        let layout = path.with_extension("oci-stage");
        let blobs = layout.join("blobs/sha256");
        fs::create_dir_all(&blobs).unwrap();
        for blob in [&self.layer, &self.config, &self.manifest] {
            fs::write(blobs.join(&sha256(blob)["sha256:".len()..]), blob).unwrap();
        }
        fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let index = json!({ "schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(&self.manifest), "size": self.manifest.len(),
        }]});
        fs::write(layout.join("index.json"), index.to_string()).unwrap();
        fs::write(path, tar_of(&layout, "")).unwrap();
    }

    pub fn manifest_json(&self) -> Value {
        serde_json::from_slice(&self.manifest).unwrap()
    }
}

fn tar_of(dir: &Path, prefix: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(prefix, dir).unwrap();
    builder.into_inner().unwrap()
}
