//! A file tree to put in an image, written as a reproducible tar; and the safe unpacking
//! of tars both image formats share.
//!
//! Reproducible means the same bytes from the same inputs: entries in sorted order,
//! owner root (0:0) with no user or group names, one fixed mtime, modes as given, and
//! nothing read from the building machine but the files' contents.

use super::ImageError;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

/// One entry of a [`Tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir { mode: u32 },
    File { mode: u32, data: Vec<u8> },
    Symlink { target: String },
}

/// Files, directories and symbolic links by path (relative, `/`-separated, no `..`).
/// Parent directories are added with mode 0755 when not given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> &mut Tree {
        self.insert(path, Node::Dir { mode })
    }

    pub fn file(&mut self, path: &str, mode: u32, data: impl Into<Vec<u8>>) -> &mut Tree {
        self.insert(path, Node::File { mode, data: data.into() })
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Tree {
        self.insert(path, Node::Symlink { target: target.to_string() })
    }

    fn insert(&mut self, path: &str, node: Node) -> &mut Tree {
        let path = path.trim_matches('/');
        assert!(
            !path.is_empty() && path.split('/').all(|c| !c.is_empty() && c != "." && c != ".."),
            "image paths are relative and plain: {path:?}"
        );
        let mut parent = Path::new(path).parent();
        while let Some(dir) = parent.filter(|p| !p.as_os_str().is_empty()) {
            self.nodes.entry(dir.to_string_lossy().into_owned()).or_insert(Node::Dir { mode: 0o755 });
            parent = dir.parent();
        }
        self.nodes.insert(path.to_string(), node);
        self
    }

    /// Every path, sorted, with its node.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(p, n)| (p.as_str(), n))
    }

    /// Writes the tree as tar entries below `prefix` (`""` or e.g. `"rootfs"`, which is
    /// written as a directory entry of its own) into `builder`.
    pub fn append_to<W: Write>(
        &self,
        builder: &mut tar::Builder<W>,
        prefix: &str,
        mtime: u64,
    ) -> std::io::Result<()> {
        let full = |path: &str| if prefix.is_empty() { path.to_string() } else { format!("{prefix}/{path}") };
        if !prefix.is_empty() {
            append_dir(builder, prefix, 0o755, mtime)?;
        }
        for (path, node) in &self.nodes {
            match node {
                Node::Dir { mode } => append_dir(builder, &full(path), *mode, mtime)?,
                Node::File { mode, data } => {
                    let mut header = header(tar::EntryType::Regular, *mode, data.len() as u64, mtime);
                    builder.append_data(&mut header, full(path), data.as_slice())?;
                }
                Node::Symlink { target } => {
                    let mut header = header(tar::EntryType::Symlink, 0o777, 0, mtime);
                    builder.append_link(&mut header, full(path), target)?;
                }
            }
        }
        Ok(())
    }

    /// The tree as a tar archive (no prefix), finished.
    pub fn to_tar(&self, mtime: u64) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        self.append_to(&mut builder, "", mtime).expect("writing a tar to memory cannot fail");
        builder.into_inner().expect("writing a tar to memory cannot fail")
    }
}

/// A tar header with fixed owner and time, as every entry of our images has.
pub(crate) fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header
}

fn append_dir<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    mtime: u64,
) -> std::io::Result<()> {
    let mut header = header(tar::EntryType::Directory, mode, 0, mtime);
    builder.append_data(&mut header, format!("{path}/"), std::io::empty())
}

/// A tar's own paths as written (for listing and checks), `./` and trailing `/` removed.
pub fn entry_path(entry: &tar::Entry<impl Read>) -> Result<String, ImageError> {
    let path = entry.path().map_err(|e| ImageError::Format(format!("unreadable entry name: {e}")))?;
    let text = path.to_string_lossy();
    Ok(text.trim_start_matches("./").trim_end_matches('/').to_string())
}

/// Refuses a path that is absolute or climbs with `..` (before anything is written).
pub(crate) fn check_relative(path: &str) -> Result<(), ImageError> {
    let bad = Path::new(path).components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if bad {
        return Err(ImageError::Format(format!("entry {path:?} is not a plain relative path")));
    }
    Ok(())
}

/// A tar reader that unpacks as an image needs: modes, times and (when running as root)
/// owners kept, existing files replaced (later layers win), no extended attributes.
pub(crate) fn archive<R: Read>(input: R) -> tar::Archive<R> {
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    // SAFETY: geteuid has no preconditions.
    archive.set_preserve_ownerships(unsafe { libc::geteuid() } == 0);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    archive
}

/// Unpacks one entry of an [`archive`] below `dest`. The tar crate refuses entries (and
/// hard-link targets) that would land outside `dest`, also through symbolic links
/// unpacked earlier.
pub(crate) fn unpack_entry(entry: &mut tar::Entry<impl Read>, dest: &Path) -> Result<(), ImageError> {
    let path = entry_path(entry)?;
    check_relative(&path)?;
    match entry.unpack_in(dest) {
        Ok(true) => Ok(()),
        Ok(false) => {
            Err(ImageError::Format(format!("entry {path:?} would be written outside {}", dest.display())))
        }
        Err(e) => {
            Err(ImageError::Io { context: format!("unpacking {path:?} into {}", dest.display()), source: e })
        }
    }
}

/// A tar reader over `input`, decompressing it first when it starts with gzip's magic.
pub(crate) fn maybe_gzip<'a>(mut input: impl Read + 'a) -> std::io::Result<Box<dyn Read + 'a>> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match input.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let head = std::io::Cursor::new(magic[..got].to_vec()).chain(input);
    if got == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(flate2::read::GzDecoder::new(head)))
    } else {
        Ok(Box::new(head))
    }
}

/// A path joined below `root` from an image-relative path already checked.
pub(crate) fn below(root: &Path, relative: &str) -> PathBuf {
    root.join(relative.trim_start_matches('/'))
}
