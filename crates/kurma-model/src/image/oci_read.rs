//! Reading OCI image layouts and archives, and applying layers, with every blob checked
//! against its digest and size before it is used.

use super::oci::{Descriptor, Digest, MEDIA_DOCKER_LIST, MEDIA_INDEX, REF_NAME};
use super::tree::{self, EntryName};
use super::{hex, ImageError, MAX_DOCUMENT_BYTES};
use serde_json::Value;
use sha2::Digest as _;
use std::io::Read;
use std::path::{Path, PathBuf};

/// An image found in a layout: its manifest and config (both verified) and its layers.
#[derive(Debug, Clone)]
pub struct OciImage {
    /// The layout directory the blobs are in.
    pub layout: PathBuf,
    pub manifest_descriptor: Descriptor,
    pub manifest: Value,
    pub config: Value,
    /// The layers, lowest first.
    pub layers: Vec<Descriptor>,
}

impl OciImage {
    /// The command the image runs: `config.Entrypoint` followed by `config.Cmd`.
    pub fn command(&self) -> Vec<String> {
        let list = |key: &str| -> Vec<String> {
            let value = self.config.get("config").and_then(|c| c.get(key)).and_then(Value::as_array);
            value
                .map(|v| v.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default()
        };
        let mut command = list("Entrypoint");
        command.extend(list("Cmd"));
        command
    }
}

/// Checks `bytes` against a descriptor's digest and size.
pub fn verify_bytes(bytes: &[u8], descriptor: &Descriptor) -> Result<(), ImageError> {
    check(descriptor, bytes.len() as u64, &Digest::of(bytes))
}

/// Checks the file at `path` against a descriptor's digest and size, reading it once.
pub fn verify_blob(path: &Path, descriptor: &Descriptor) -> Result<(), ImageError> {
    let (actual, size) = digest_file(path)?;
    check(descriptor, size, &actual)
}

/// The sha256 digest and the size of the file at `path`, read once.
pub fn digest_file(path: &Path) -> Result<(Digest, u64), ImageError> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| ImageError::io(format!("opening blob {}", path.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| ImageError::io(format!("reading blob {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        size += n as u64;
    }
    let actual = Digest::parse(&format!("sha256:{}", hex(&hasher.finalize()))).expect("a sha256 is a digest");
    Ok((actual, size))
}

fn check(descriptor: &Descriptor, size: u64, actual: &Digest) -> Result<(), ImageError> {
    let fail = |reason: String| ImageError::Digest { digest: descriptor.digest.to_string(), reason };
    if size != descriptor.size {
        return Err(fail(format!("{size} bytes, the descriptor says {}", descriptor.size)));
    }
    if actual != &descriptor.digest {
        return Err(fail(format!("the content's digest is {actual}")));
    }
    Ok(())
}

/// Reads a verified JSON blob of a layout.
fn read_json_blob(layout: &Path, descriptor: &Descriptor) -> Result<Value, ImageError> {
    if descriptor.size > MAX_DOCUMENT_BYTES {
        return Err(ImageError::Digest {
            digest: descriptor.digest.to_string(),
            reason: format!("declared as {} bytes, more than a JSON document may have", descriptor.size),
        });
    }
    let path = layout.join(descriptor.digest.blob_path());
    let bytes =
        std::fs::read(&path).map_err(|e| ImageError::io(format!("reading blob {}", path.display()), e))?;
    verify_bytes(&bytes, descriptor)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::Format(format!("blob {} is not JSON: {e}", descriptor.digest)))
}

fn read_json_file(path: &Path) -> Result<Value, ImageError> {
    let bytes = std::fs::read(path).map_err(|e| ImageError::io(format!("reading {}", path.display()), e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::Format(format!("{} is not JSON: {e}", path.display())))
}

/// Picks a manifest from an index's `manifests`: the one tagged `tag` if given, else the
/// only one, else the linux/amd64 one. A registry client follows an index the same way.
pub fn choose_manifest<'a>(manifests: &'a [Value], tag: Option<&str>) -> Result<&'a Value, ImageError> {
    let annotation = |m: &Value| {
        m.get("annotations").and_then(|a| a.get(REF_NAME)).and_then(Value::as_str).map(str::to_string)
    };
    if let Some(tag) = tag {
        return manifests.iter().find(|m| annotation(m).as_deref() == Some(tag)).ok_or_else(|| {
            let tags: Vec<String> = manifests.iter().filter_map(annotation).collect();
            ImageError::Format(format!("no image tagged {tag:?} in the index (tags: {tags:?})"))
        });
    }
    if let [only] = manifests {
        return Ok(only);
    }
    let platform = |m: &&Value, key: &str| {
        m.get("platform").and_then(|p| p.get(key)).and_then(Value::as_str).map(str::to_string)
    };
    manifests
        .iter()
        .find(|m| {
            platform(m, "os").as_deref() == Some("linux")
                && platform(m, "architecture").as_deref() == Some("amd64")
        })
        .ok_or_else(|| {
            ImageError::Format(format!("the index has {} images and none for linux/amd64", manifests.len()))
        })
}

/// Reads the image of an OCI layout directory (`tag` chooses one when the index has
/// several): checks `oci-layout`, follows `index.json` (and nested indexes) to the
/// manifest, and verifies the manifest and config blobs. Layers are verified when
/// unpacked ([`unpack_rootfs`]).
pub fn read_layout(layout: &Path, tag: Option<&str>) -> Result<OciImage, ImageError> {
    let marker = read_json_file(&layout.join("oci-layout"))?;
    if marker.get("imageLayoutVersion").and_then(Value::as_str).is_none() {
        return Err(ImageError::Format("oci-layout has no imageLayoutVersion".into()));
    }
    let mut index = read_json_file(&layout.join("index.json"))?;
    let mut tag = tag;
    // An index may point to an index (a multi-platform image); two levels are plenty.
    for _ in 0..3 {
        let manifests = index.get("manifests").and_then(Value::as_array).cloned().unwrap_or_default();
        let chosen = Descriptor::from_json(choose_manifest(&manifests, tag)?)?;
        let blob = read_json_blob(layout, &chosen)?;
        if chosen.media_type == MEDIA_INDEX || chosen.media_type == MEDIA_DOCKER_LIST {
            index = blob;
            tag = None;
            continue;
        }
        let config = Descriptor::from_json(
            blob.get("config").ok_or_else(|| ImageError::Format("the manifest has no config".into()))?,
        )?;
        let layers = blob
            .get("layers")
            .and_then(Value::as_array)
            .ok_or_else(|| ImageError::Format("the manifest has no layers".into()))?
            .iter()
            .map(Descriptor::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        let config_json = read_json_blob(layout, &config)?;
        return Ok(OciImage {
            layout: layout.to_path_buf(),
            manifest_descriptor: chosen,
            manifest: blob,
            config: config_json,
            layers,
        });
    }
    Err(ImageError::Format("indexes nested more than three deep".into()))
}

/// Unpacks an OCI archive (a tar of a layout, gzip-compressed or not) into the directory
/// `layout` and reads its image (see [`read_layout`]).
pub fn unpack_archive(input: impl Read, layout: &Path, tag: Option<&str>) -> Result<OciImage, ImageError> {
    std::fs::create_dir_all(layout)
        .map_err(|e| ImageError::io(format!("creating {}", layout.display()), e))?;
    let reader = tree::maybe_gzip(input).map_err(|e| ImageError::io("reading the OCI archive", e))?;
    let mut archive = tree::archive(reader);
    for entry in archive.entries().map_err(|e| ImageError::io("reading the OCI archive", e))? {
        let mut entry = entry.map_err(|e| ImageError::io("reading the OCI archive", e))?;
        tree::unpack_entry(&mut entry, layout)?;
    }
    read_layout(layout, tag)
}

/// Unpacks an image's layers, lowest first, into `rootfs`; each layer blob is verified
/// before any of it is applied.
pub fn unpack_rootfs(image: &OciImage, rootfs: &Path) -> Result<(), ImageError> {
    std::fs::create_dir_all(rootfs)
        .map_err(|e| ImageError::io(format!("creating {}", rootfs.display()), e))?;
    for layer in &image.layers {
        let path = image.layout.join(layer.digest.blob_path());
        verify_blob(&path, layer)?;
        let file = std::fs::File::open(&path)
            .map_err(|e| ImageError::io(format!("opening {}", path.display()), e))?;
        apply_layer(file, &layer.media_type, rootfs)?;
    }
    Ok(())
}

/// Applies one layer (a tar; gzip-compressed when `media_type` ends in `gzip`, as OCI's
/// and Docker's compressed layer types do) onto `rootfs`, honouring whiteouts: `.wh.NAME`
/// removes NAME, `.wh..wh..opq` empties its directory (names checked by
/// [`tree::classify`]: a whiteout never names `.`, `..` or nothing). The caller verifies
/// the blob.
pub fn apply_layer(blob: impl Read, media_type: &str, rootfs: &Path) -> Result<(), ImageError> {
    if !(media_type.ends_with("tar") || media_type.ends_with("gzip")) {
        return Err(ImageError::Format(format!(
            "layer media type {media_type:?} is not supported (tar or tar+gzip)"
        )));
    }
    let reader = tree::maybe_gzip(blob).map_err(|e| ImageError::io("reading a layer", e))?;
    let mut archive = tree::archive(reader);
    for entry in archive.entries().map_err(|e| ImageError::io("reading a layer", e))? {
        let mut entry = entry.map_err(|e| ImageError::io("reading a layer", e))?;
        match tree::entry_name(&entry)? {
            EntryName::Opaque { parent } => whiteout(rootfs, &parent, None)?,
            EntryName::Whiteout { parent, name } => whiteout(rootfs, &parent, Some(&name))?,
            EntryName::Path(_) => tree::unpack_entry(&mut entry, rootfs)?,
        }
    }
    Ok(())
}

/// Removes `parent/name` (or everything in `parent`) below `rootfs`, refusing a parent
/// that resolves outside it. `name` is a plain file name ([`tree::classify`]).
fn whiteout(rootfs: &Path, parent: &str, name: Option<&str>) -> Result<(), ImageError> {
    let dir = tree::below(rootfs, parent);
    let Ok(real_dir) = dir.canonicalize() else {
        return Ok(()); // nothing there to hide
    };
    let real_root =
        rootfs.canonicalize().map_err(|e| ImageError::io(format!("resolving {}", rootfs.display()), e))?;
    if !real_dir.starts_with(&real_root) {
        return Err(ImageError::Format(format!("whiteout in {parent:?} resolves outside the rootfs")));
    }
    let targets: Vec<PathBuf> = match name {
        Some(name) => vec![real_dir.join(name)],
        None => std::fs::read_dir(&real_dir)
            .map_err(|e| ImageError::io(format!("reading {}", real_dir.display()), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect(),
    };
    for target in targets {
        let removed = match std::fs::symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&target),
            Ok(_) => std::fs::remove_file(&target),
            Err(_) => Ok(()),
        };
        removed.map_err(|e| ImageError::io(format!("removing {}", target.display()), e))?;
    }
    Ok(())
}
