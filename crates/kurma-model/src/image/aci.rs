//! App Container images (ACI): a tar (optionally gzip-compressed when read) holding
//! `manifest`, the image manifest JSON (`acKind: ImageManifest`), and `rootfs/`, the
//! files. The format carries no digests of its own; a fetcher checks what it is given.

use super::tree::{self, Tree};
use super::{ImageError, MAX_DOCUMENT_BYTES};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;

/// The appc specification version our manifests declare.
pub const AC_VERSION: &str = "0.8.11";

/// An image manifest: `name`, `labels` (`version`, `os`, `arch` and any others, in the
/// order given) and the app's `exec` (the command the image's container runs).
pub fn manifest(name: &str, labels: &[(&str, &str)], exec: &[&str]) -> Value {
    let labels: Vec<Value> = labels.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
    json!({
        "acKind": "ImageManifest",
        "acVersion": AC_VERSION,
        "name": name,
        "labels": labels,
        "app": {"exec": exec, "user": "0", "group": "0"},
    })
}

/// Writes an ACI: `manifest` first, then `rootfs/` and the tree below it, reproducibly
/// (see [`tree`]).
pub fn write(manifest: &Value, rootfs: &Tree, mtime: u64, out: impl Write) -> std::io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let bytes = serde_json::to_vec_pretty(manifest).expect("a JSON value always serialises");
    let mut header = tree::header(tar::EntryType::Regular, 0o644, bytes.len() as u64, mtime);
    builder.append_data(&mut header, "manifest", bytes.as_slice())?;
    rootfs.append_to(&mut builder, "rootfs", mtime)?;
    builder.into_inner()?.flush()
}

/// Unpacks an ACI (plain or gzip-compressed tar) into `dest`: `dest/manifest` and
/// `dest/rootfs/...`. Returns the manifest, checked to be an image manifest with a name.
/// Entries other than `manifest` and those below `rootfs/` are refused, as are paths
/// that would land outside `dest`.
pub fn unpack(input: impl Read, dest: &Path) -> Result<Value, ImageError> {
    std::fs::create_dir_all(dest).map_err(|e| ImageError::io(format!("creating {}", dest.display()), e))?;
    let reader = tree::maybe_gzip(input).map_err(|e| ImageError::io("reading the ACI", e))?;
    let mut archive = tree::archive(reader);
    let entries = archive.entries().map_err(|e| ImageError::io("reading the ACI", e))?;
    let mut manifest = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| ImageError::io("reading the ACI", e))?;
        let path = tree::entry_path(&entry)?;
        if path == "manifest" {
            if entry.size() > MAX_DOCUMENT_BYTES {
                return Err(ImageError::Format(format!(
                    "the ACI manifest is {} bytes, more than the {MAX_DOCUMENT_BYTES} a manifest may have",
                    entry.size()
                )));
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).map_err(|e| ImageError::io("reading the ACI manifest", e))?;
            std::fs::write(dest.join("manifest"), &bytes)
                .map_err(|e| ImageError::io(format!("writing {}", dest.join("manifest").display()), e))?;
            manifest = Some(bytes);
        } else if path == "rootfs" || path.starts_with("rootfs/") {
            tree::unpack_entry(&mut entry, dest)?;
        } else {
            return Err(ImageError::Format(format!(
                "ACI entry {path:?} is neither manifest nor below rootfs/"
            )));
        }
    }
    let bytes = manifest.ok_or_else(|| ImageError::Format("the ACI has no manifest".into()))?;
    let manifest: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::Format(format!("the ACI manifest is not JSON: {e}")))?;
    check_manifest(&manifest)?;
    if !dest.join("rootfs").is_dir() {
        return Err(ImageError::Format("the ACI has no rootfs/".into()));
    }
    Ok(manifest)
}

/// Checks the fields every image manifest must have.
pub fn check_manifest(manifest: &Value) -> Result<(), ImageError> {
    if manifest.get("acKind").and_then(Value::as_str) != Some("ImageManifest") {
        return Err(ImageError::Format("the ACI manifest's acKind is not \"ImageManifest\"".into()));
    }
    if manifest.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(ImageError::Format("the ACI manifest has no name".into()));
    }
    Ok(())
}

/// The app's `exec` of a manifest (the image's command), empty when it has none.
pub fn exec(manifest: &Value) -> Vec<String> {
    let exec = manifest.get("app").and_then(|a| a.get("exec")).and_then(Value::as_array);
    exec.map(|e| e.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
}
