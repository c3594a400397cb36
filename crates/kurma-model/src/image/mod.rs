//! The image formats netplugins ship in, written and read by the same code.
//!
//! - [`tree`]: a file tree and its reproducible tar.
//! - [`aci`]: App Container images: a tar of `manifest` (the ImageManifest JSON) and
//!   `rootfs/`. [`aci::write`] and [`aci::unpack`].
//! - [`oci`]: OCI image layouts (`oci-layout`, `index.json`, `blobs/sha256/...`) as a tar
//!   archive or a directory. [`oci::write_archive`]; [`oci::unpack_archive`],
//!   [`oci::read_layout`], [`oci::unpack_rootfs`], and for images fetched from a
//!   registry [`oci::Digest`], [`oci::verify_blob`] and [`oci::apply_layer`]. Every blob
//!   read is checked against its sha256 digest (and size).
//! - [`unpack_file`]: an image file of either format (plain or gzip-compressed), as a
//!   host fetching an `aci` URI gets it.
//! - [`build`]: the two netplugin images of this repository, `cni-netplugin` and
//!   `lo-netplugin`, in both formats.

pub mod aci;
pub mod build;
mod detect;
pub mod oci;
mod oci_read;
pub mod tree;

pub use detect::{kind_of, unpack_file, ImageKind};

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;

/// The most a JSON document of an image may weigh (an OCI manifest, index or config, an
/// ACI manifest): 4 MiB, what registries themselves accept for a manifest. Real ones are
/// a few KiB; the cap is what keeps a hostile one from filling memory.
pub const MAX_DOCUMENT_BYTES: u64 = 4 << 20;

/// Why an image cannot be written, read or unpacked.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The image is not in the format it claims (a missing file, bad JSON, a bad path).
    #[error("invalid image: {0}")]
    Format(String),
    /// A blob's content does not match the digest (or size) it is referred to by.
    #[error("blob {digest}: {reason}")]
    Digest { digest: String, reason: String },
}

impl ImageError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> ImageError {
        ImageError::Io { context: context.into(), source }
    }
}

/// The lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex(&sha2::Sha256::digest(bytes))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
