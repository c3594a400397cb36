//! Unpacking an image file whose format is not known in advance (a host fetching an
//! `aci` URI gets either): ACI or OCI archive, plain or gzip-compressed, told apart by
//! the archive's own entries.

use super::{aci, oci, tree, ImageError};
use std::path::Path;

/// Which format an image file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// An ACI: it has a `manifest` entry.
    Aci,
    /// An OCI image archive: it has `oci-layout` / `index.json`.
    Oci,
}

/// Tells the format of the (plain or gzip-compressed) tar at `path` from its entries.
pub fn kind_of(path: &Path) -> Result<ImageKind, ImageError> {
    let open = |e| ImageError::io(format!("reading {}", path.display()), e);
    let file = std::fs::File::open(path).map_err(open)?;
    let mut archive = tar::Archive::new(tree::maybe_gzip(std::io::BufReader::new(file)).map_err(open)?);
    for entry in archive.entries().map_err(open)? {
        let entry = entry.map_err(open)?;
        match tree::entry_path(&entry)?.as_str() {
            "manifest" => return Ok(ImageKind::Aci),
            "oci-layout" | "index.json" => return Ok(ImageKind::Oci),
            _ => {}
        }
    }
    Err(ImageError::Format(format!(
        "{} is neither an ACI (no manifest) nor an OCI image archive (no oci-layout)",
        path.display()
    )))
}

/// Unpacks the ACI or OCI archive at `path` so that its root filesystem is `rootfs`
/// (which must not exist yet), using `scratch` (an empty directory on the same file
/// system) for the archive itself. Every OCI blob is checked against its digest.
pub fn unpack_file(path: &Path, scratch: &Path, rootfs: &Path) -> Result<ImageKind, ImageError> {
    let kind = kind_of(path)?;
    let open = |e| ImageError::io(format!("reading {}", path.display()), e);
    let file = std::io::BufReader::new(std::fs::File::open(path).map_err(open)?);
    match kind {
        ImageKind::Aci => {
            aci::unpack(file, scratch)?;
            if let Some(parent) = rootfs.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| ImageError::io(format!("creating {}", parent.display()), e))?;
            }
            std::fs::rename(scratch.join("rootfs"), rootfs)
                .map_err(|e| ImageError::io(format!("moving the ACI rootfs to {}", rootfs.display()), e))?;
        }
        ImageKind::Oci => {
            let image = oci::unpack_archive(file, scratch, None)?;
            oci::unpack_rootfs(&image, rootfs)?;
        }
    }
    Ok(kind)
}
