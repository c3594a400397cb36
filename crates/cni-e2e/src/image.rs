//! The test image: Debian's static busybox in an otherwise empty root filesystem.
//!
//! No registry is reachable, so the image is built locally: a rootfs tarball for
//! `podman import`, and an OCI image-layout archive for `ctr image import`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::process::stdout_of_success;

/// Where Debian's `busybox-static` installs the binary.
pub const BUSYBOX: &str = "/bin/busybox";
/// The name the image gets in each engine.
pub const IMAGE_NAME: &str = "localhost/cne-busybox:latest";
/// The body busybox httpd serves at `/` (from `/var/www`).
pub const INDEX_BODY: &str = "hello from cni-e2e\n";

/// The applets the tests call, as links to busybox.
const APPLETS: &[&str] = &["sh", "ip", "ping", "httpd", "nc", "printf", "cat", "sleep", "true", "echo"];

/// Writes the rootfs tarball into `dir` and returns its path.
pub fn rootfs_tar(dir: &Path) -> PathBuf {
    assert!(Path::new(BUSYBOX).is_file(), "{BUSYBOX} is missing: install Debian's busybox-static package");
    let rootfs = dir.join("rootfs");
    for sub in ["bin", "etc", "tmp", "proc", "sys", "dev", "var/www"] {
        fs::create_dir_all(rootfs.join(sub)).expect("create rootfs directory");
    }
    fs::copy(BUSYBOX, rootfs.join("bin/busybox")).expect("copy busybox into the rootfs");
    for applet in APPLETS {
        symlink("busybox", rootfs.join("bin").join(applet)).expect("link a busybox applet");
    }
    fs::write(rootfs.join("var/www/index.html"), INDEX_BODY).expect("write index.html");
    fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").expect("write /etc/passwd");
    fs::write(rootfs.join("etc/group"), "root:x:0:\n").expect("write /etc/group");
    let tar = dir.join("busybox-rootfs.tar");
    stdout_of_success(
        Command::new("tar").arg("-C").arg(&rootfs).arg("-cf").arg(&tar).arg("."),
        "tar the busybox rootfs",
    );
    tar
}

/// Writes an OCI image-layout archive of the rootfs tarball `layer` (one uncompressed
/// layer) into `dir`, named [`IMAGE_NAME`], for `ctr image import`, and returns its path.
pub fn oci_archive(dir: &Path, layer: &Path) -> PathBuf {
    let layout = dir.join("oci-layout-dir");
    let blobs = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs).expect("create the OCI blobs directory");
    let write_blob = |bytes: &[u8]| -> serde_json::Value {
        let digest = format!("{:x}", Sha256::digest(bytes));
        fs::write(blobs.join(&digest), bytes).expect("write an OCI blob");
        serde_json::json!({ "digest": format!("sha256:{digest}"), "size": bytes.len() })
    };
    let descriptor = |media_type: &str, blob: serde_json::Value| -> serde_json::Value {
        let mut descriptor = blob;
        descriptor["mediaType"] = media_type.into();
        descriptor
    };

    let layer_blob = write_blob(&fs::read(layer).expect("read the rootfs tarball"));
    let config = serde_json::json!({
        "architecture": oci_architecture(),
        "os": "linux",
        // The default command makes it a sandbox ("pause") image for the CRI plugin too.
        "config": { "Env": ["PATH=/bin"], "Cmd": ["sleep", "2147483647"] },
        "rootfs": { "type": "layers", "diff_ids": [layer_blob["digest"].clone()] },
    });
    let config_blob = write_blob(config.to_string().as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", config_blob),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", layer_blob)],
    });
    let mut manifest_descriptor =
        descriptor("application/vnd.oci.image.manifest.v1+json", write_blob(manifest.to_string().as_bytes()));
    manifest_descriptor["annotations"] = serde_json::json!({
        "io.containerd.image.name": IMAGE_NAME,
        "org.opencontainers.image.ref.name": "latest",
    });
    let index = serde_json::json!({ "schemaVersion": 2, "manifests": [manifest_descriptor] });
    fs::write(layout.join("index.json"), index.to_string()).expect("write index.json");
    fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("write oci-layout");

    let archive = dir.join("busybox-oci.tar");
    stdout_of_success(
        Command::new("tar").arg("-C").arg(&layout).arg("-cf").arg(&archive).args([
            "oci-layout",
            "index.json",
            "blobs",
        ]),
        "tar the OCI image layout",
    );
    archive
}

/// The OCI name of this machine's architecture.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
