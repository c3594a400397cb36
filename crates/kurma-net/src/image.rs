//! Unpacking netplugin images into a root filesystem, checking digests where the format
//! has them. All image-format knowledge of the host side lives here (plus the registry
//! client in [`crate::registry`], which only downloads blobs for [`unpack_blobs`]).
//!
//! - ACI: a tar (optionally gzip-compressed) holding a `manifest` JSON file
//!   (`acKind: ImageManifest`) and the root filesystem under `rootfs/`.
//! - OCI image archive: a tar of an OCI image layout (`oci-layout`, `index.json`,
//!   `blobs/sha256/…`): index → manifest (an image index is followed to the entry for this
//!   host's platform) → layers applied in order. Every blob's sha256 is checked.

use std::fs::{self, File};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Which format an image turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    Aci,
    Oci,
}

/// Unpacks the ACI or OCI archive at `archive` so that its root filesystem is `rootfs`
/// (which must not exist yet); `scratch` is an empty directory for the outer tar.
pub fn unpack_archive(archive: &Path, scratch: &Path, rootfs: &Path) -> Result<ImageKind, String> {
    extract_tar(archive, scratch)?;
    if scratch.join("manifest").is_file() {
        let manifest = read_json(&scratch.join("manifest"))?;
        if manifest.get("acKind").and_then(Value::as_str) != Some("ImageManifest") {
            return Err("ACI manifest: \"acKind\" is not \"ImageManifest\"".into());
        }
        let inner = scratch.join("rootfs");
        if !inner.is_dir() {
            return Err("ACI has a manifest but no rootfs/ directory".into());
        }
        if let Some(parent) = rootfs.parent() {
            fs::create_dir_all(parent).map_err(|err| format!("{}: {err}", parent.display()))?;
        }
        fs::rename(&inner, rootfs).map_err(|err| format!("move the ACI rootfs into place: {err}"))?;
        return Ok(ImageKind::Aci);
    }
    if scratch.join("index.json").is_file() {
        let index = read_json(&scratch.join("index.json"))?;
        let manifest = choose_manifest(&index, &|digest| {
            let path = blob_path(&scratch.join("blobs"), digest)?;
            verify_digest(&path, digest)?;
            read_json(&path)
        })?;
        unpack_blobs(&scratch.join("blobs"), &manifest, rootfs)?;
        return Ok(ImageKind::Oci);
    }
    Err("neither an ACI (no \"manifest\" file) nor an OCI image archive (no \"index.json\")".into())
}

/// Follows an OCI image index (or Docker manifest list) to the image manifest for this
/// host's platform; `fetch` returns the verified JSON blob of a digest. A manifest given
/// directly is returned as it is.
pub fn choose_manifest(doc: &Value, fetch: &dyn Fn(&str) -> Result<Value, String>) -> Result<Value, String> {
    let mut doc = doc.clone();
    // An index may point at another index (e.g. an OCI layout's index.json at a registry's).
    for _ in 0..4 {
        let Some(entries) = doc.get("manifests").and_then(Value::as_array) else {
            return Ok(doc);
        };
        let pick = entries
            .iter()
            .find(|m| {
                let platform = m.get("platform");
                platform.is_none()
                    || (platform.and_then(|p| p.get("os")).and_then(Value::as_str) == Some("linux")
                        && platform.and_then(|p| p.get("architecture")).and_then(Value::as_str)
                            == Some(host_architecture()))
            })
            .ok_or_else(|| format!("the image index has no manifest for linux/{}", host_architecture()))?;
        let digest = pick.get("digest").and_then(Value::as_str).ok_or("an index entry has no \"digest\"")?;
        doc = fetch(digest)?;
    }
    Err("image indexes nest too deeply".into())
}

/// Applies the layers of the image manifest `manifest`, whose blobs are files under
/// `blobs/<algorithm>/<hex>`, to a new `rootfs`, checking each blob's digest.
pub fn unpack_blobs(blobs: &Path, manifest: &Value, rootfs: &Path) -> Result<(), String> {
    let layers =
        manifest.get("layers").and_then(Value::as_array).ok_or("the image manifest has no \"layers\"")?;
    if let Some(config) = manifest.get("config").and_then(|c| c.get("digest")).and_then(Value::as_str) {
        verify_digest(&blob_path(blobs, config)?, config)?;
    }
    fs::create_dir_all(rootfs).map_err(|err| format!("{}: {err}", rootfs.display()))?;
    for layer in layers {
        let digest = layer.get("digest").and_then(Value::as_str).ok_or("a layer has no \"digest\"")?;
        let path = blob_path(blobs, digest)?;
        verify_digest(&path, digest)?;
        apply_layer(&path, rootfs).map_err(|err| format!("layer {digest}: {err}"))?;
    }
    Ok(())
}

/// The file of blob `digest` (`sha256:<64 hex>`) under `blobs`.
pub fn blob_path(blobs: &Path, digest: &str) -> Result<PathBuf, String> {
    let hex = sha256_hex_of(digest)?;
    Ok(blobs.join("sha256").join(hex))
}

fn sha256_hex_of(digest: &str) -> Result<&str, String> {
    match digest.split_once(':') {
        Some(("sha256", hex)) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(hex),
        _ => Err(format!("unsupported or malformed digest {digest:?} (expected sha256:<64 hex digits>)")),
    }
}

/// Checks that the file at `path` hashes to `digest`.
pub fn verify_digest(path: &Path, digest: &str) -> Result<(), String> {
    let expected = sha256_hex_of(digest)?;
    let mut file = File::open(path).map_err(|err| format!("blob {digest}: {err}"))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|err| format!("blob {digest}: {err}"))?;
    let actual = format!("{:x}", hasher.finalize());
    if actual != expected {
        return Err(format!("blob {digest}: digest mismatch, the content hashes to sha256:{actual}"));
    }
    Ok(())
}

/// A tar reader over `path`, gunzipping when the file starts with gzip's magic.
fn open_tar(path: &Path) -> Result<tar::Archive<Box<dyn Read>>, String> {
    let mut file = File::open(path).map_err(|err| format!("{}: {err}", path.display()))?;
    let mut magic = [0u8; 2];
    let gzip = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    file.seek(SeekFrom::Start(0)).map_err(|err| err.to_string())?;
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(BufReader::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    Ok(archive)
}

fn extract_tar(path: &Path, dest: &Path) -> Result<(), String> {
    fs::create_dir_all(dest).map_err(|err| format!("{}: {err}", dest.display()))?;
    open_tar(path)?.unpack(dest).map_err(|err| format!("unpack {}: {err}", path.display()))
}

/// Applies one layer tar: OCI whiteouts (`.wh.NAME` removes NAME, `.wh..wh..opq` empties
/// its directory) first take effect, other entries are written over what is there.
fn apply_layer(path: &Path, rootfs: &Path) -> Result<(), String> {
    let mut archive = open_tar(path)?;
    for entry in archive.entries().map_err(|err| err.to_string())? {
        let mut entry = entry.map_err(|err| err.to_string())?;
        let entry_path = entry.path().map_err(|err| err.to_string())?.into_owned();
        if entry_path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!("entry {} escapes the root filesystem", entry_path.display()));
        }
        let file_name = entry_path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(hidden) = file_name.strip_prefix(".wh.") {
            let dir = rootfs.join(entry_path.parent().unwrap_or(Path::new("")));
            if hidden == ".wh..opq" {
                for child in fs::read_dir(&dir).into_iter().flatten().flatten() {
                    remove_any(&child.path());
                }
            } else {
                remove_any(&dir.join(hidden));
            }
            continue;
        }
        entry.unpack_in(rootfs).map_err(|err| format!("{}: {err}", entry_path.display()))?;
    }
    Ok(())
}

fn remove_any(path: &Path) {
    let removed =
        if path.is_dir() && !path.is_symlink() { fs::remove_dir_all(path) } else { fs::remove_file(path) };
    // A whiteout of something an earlier layer never had is not an error.
    let _ = removed;
}

fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = fs::read(path).map_err(|err| format!("{}: {err}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|err| format!("{}: not JSON: {err}", path.display()))
}

/// This host's architecture as OCI platforms name it.
pub fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, body) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            builder.append_data(&mut header, path, *body).unwrap();
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&builder.into_inner().unwrap()).unwrap();
        gz.finish().unwrap()
    }

    fn store(blobs: &Path, bytes: &[u8]) -> String {
        let digest = format!("sha256:{:x}", Sha256::digest(bytes));
        fs::create_dir_all(blobs.join("sha256")).unwrap();
        fs::write(blob_path(blobs, &digest).unwrap(), bytes).unwrap();
        digest
    }

    #[test]
    fn gzip_layers_apply_in_order_with_whiteouts() {
        let dir = tempfile::Builder::new().prefix("kh-image-").tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        let lower = store(&blobs, &tar_gz(&[("opt/network/add", b"v1"), ("etc/old", b"x")]));
        let upper = store(&blobs, &tar_gz(&[("opt/network/add", b"v2"), ("etc/.wh.old", b"")]));
        let config = store(&blobs, b"{}");
        let manifest = serde_json::json!({
            "config": { "digest": config },
            "layers": [{ "digest": lower }, { "digest": upper }],
        });
        let rootfs = dir.path().join("rootfs");
        unpack_blobs(&blobs, &manifest, &rootfs).unwrap();
        assert_eq!(fs::read(rootfs.join("opt/network/add")).unwrap(), b"v2");
        assert!(!rootfs.join("etc/old").exists(), "the whiteout removed etc/old");
    }

    #[test]
    fn a_blob_that_does_not_match_its_digest_is_refused() {
        let dir = tempfile::Builder::new().prefix("kh-image-").tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        let layer = store(&blobs, &tar_gz(&[("a", b"a")]));
        fs::write(blob_path(&blobs, &layer).unwrap(), b"changed").unwrap();
        let manifest = serde_json::json!({ "layers": [{ "digest": layer }] });
        let err = unpack_blobs(&blobs, &manifest, &dir.path().join("rootfs")).unwrap_err();
        assert!(err.contains("digest mismatch"), "{err}");
        assert!(blob_path(&blobs, "md5:00").unwrap_err().contains("unsupported or malformed digest"));
    }

    #[test]
    fn an_index_is_followed_to_this_platform() {
        let index = serde_json::json!({ "manifests": [
            { "digest": "sha256:aa", "platform": { "os": "linux", "architecture": "s390x" } },
            { "digest": "sha256:bb", "platform": { "os": "linux", "architecture": host_architecture() } },
        ]});
        let chosen =
            choose_manifest(&index, &|digest| Ok(serde_json::json!({ "layers": [], "from": digest })))
                .unwrap();
        assert_eq!(chosen["from"], "sha256:bb");
    }
}
