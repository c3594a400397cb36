//! OCI image layouts: `oci-layout`, `index.json` and content-addressed blobs under
//! `blobs/sha256/`, as a directory or packed in a tar ("OCI archive"). Our images have
//! one manifest, one config and one gzip-compressed layer.

use super::tree::Tree;
use super::{sha256_hex, ImageError};
use serde_json::{json, Value};
use std::fmt;
use std::io::Write;

pub use super::oci_read::{
    apply_layer, choose_manifest, digest_file, read_layout, unpack_archive, unpack_rootfs, verify_blob,
    verify_bytes, OciImage,
};

pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// Docker's (schema 2) equivalents, as registries serve images pushed by Docker.
pub const MEDIA_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MEDIA_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MEDIA_DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
/// The annotation naming an image in `index.json` (its tag).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// A `sha256:<64 hex>` content digest. Parsing refuses anything else, so a digest can
/// safely name a file under `blobs/sha256/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digest {
    hex: String,
}

impl Digest {
    pub fn parse(text: &str) -> Result<Digest, ImageError> {
        let bad = || ImageError::Format(format!("{text:?} is not a sha256 digest (sha256:<64 hex digits>)"));
        let hex = text.strip_prefix("sha256:").ok_or_else(bad)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(bad());
        }
        Ok(Digest { hex: hex.to_string() })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest { hex: sha256_hex(bytes) }
    }

    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The blob's path inside a layout: `blobs/sha256/<hex>`.
    pub fn blob_path(&self) -> String {
        format!("blobs/sha256/{}", self.hex)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

/// A content descriptor: what a manifest or index says about a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
}

impl Descriptor {
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor { media_type: media_type.to_string(), digest: Digest::of(bytes), size: bytes.len() as u64 }
    }

    pub fn from_json(value: &Value) -> Result<Descriptor, ImageError> {
        let field = |name: &str| {
            value.get(name).ok_or_else(|| ImageError::Format(format!("descriptor without {name}: {value}")))
        };
        let media_type = field("mediaType")?.as_str().unwrap_or_default().to_string();
        let digest = Digest::parse(field("digest")?.as_str().unwrap_or_default())?;
        let size = field("size")?
            .as_u64()
            .ok_or_else(|| ImageError::Format(format!("descriptor size is not a count: {value}")))?;
        Ok(Descriptor { media_type, digest, size })
    }

    pub fn to_json(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest.to_string(), "size": self.size})
    }
}

/// What goes into an image besides its files.
#[derive(Debug, Clone)]
pub struct ImageSpec<'a> {
    /// The tag recorded in `index.json` (`org.opencontainers.image.ref.name`).
    pub tag: &'a str,
    /// The container's command (`config.Entrypoint`).
    pub entrypoint: &'a [&'a str],
    /// `config.Labels` and the manifest's annotations.
    pub labels: &'a [(&'a str, &'a str)],
    /// The layer's gzip level (0-9): [`GZIP_BEST`] for shipped images; tests that build
    /// large throwaway images use a fast one.
    pub gzip_level: u32,
}

/// The gzip level of the shipped images.
pub const GZIP_BEST: u32 = 9;

/// The blobs of an image, built in memory: (descriptor, bytes) of config, layer, manifest.
pub struct Blobs {
    pub manifest: (Descriptor, Vec<u8>),
    pub config: (Descriptor, Vec<u8>),
    pub layer: (Descriptor, Vec<u8>),
}

/// Builds the blobs of a one-layer linux/amd64 image of `rootfs`.
pub fn build_blobs(spec: &ImageSpec, rootfs: &Tree, mtime: u64) -> Blobs {
    let layer_tar = rootfs.to_tar(mtime);
    let diff_id = Digest::of(&layer_tar);
    let mut gz =
        flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::new(spec.gzip_level.min(9)));
    gz.write_all(&layer_tar).expect("compressing into memory cannot fail");
    let layer = gz.finish().expect("compressing into memory cannot fail");
    let labels: serde_json::Map<String, Value> =
        spec.labels.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect();
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "Labels": labels.clone(), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id.to_string()]},
    });
    let config = serde_json::to_vec(&config).expect("a JSON value always serialises");
    let config_desc = Descriptor::of(MEDIA_CONFIG, &config);
    let layer_desc = Descriptor::of(MEDIA_LAYER_GZIP, &layer);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc.to_json(),
        "layers": [layer_desc.to_json()],
        "annotations": labels,
    });
    let manifest = serde_json::to_vec(&manifest).expect("a JSON value always serialises");
    Blobs {
        manifest: (Descriptor::of(MEDIA_MANIFEST, &manifest), manifest),
        config: (config_desc, config),
        layer: (layer_desc, layer),
    }
}

/// Writes an OCI archive: a tar of the image layout (`oci-layout`, `index.json` naming
/// the manifest with its tag, `blobs/sha256/...`), reproducibly.
pub fn write_archive(spec: &ImageSpec, rootfs: &Tree, mtime: u64, out: impl Write) -> std::io::Result<Blobs> {
    let blobs = build_blobs(spec, rootfs, mtime);
    let mut manifest_desc = blobs.manifest.0.to_json();
    manifest_desc["annotations"] = json!({ REF_NAME: spec.tag });
    manifest_desc["platform"] = json!({"architecture": "amd64", "os": "linux"});
    let index = json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [manifest_desc]});
    let mut layout = Tree::new();
    layout.file("oci-layout", 0o644, r#"{"imageLayoutVersion":"1.0.0"}"#);
    layout.file("index.json", 0o644, serde_json::to_vec(&index).expect("a JSON value always serialises"));
    for (desc, bytes) in [&blobs.config, &blobs.layer, &blobs.manifest] {
        layout.file(&desc.digest.blob_path(), 0o644, bytes.clone());
    }
    let mut builder = tar::Builder::new(out);
    layout.append_to(&mut builder, "", mtime)?;
    builder.into_inner()?.flush()?;
    Ok(blobs)
}
