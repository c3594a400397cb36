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

/// What an image tar's entry is, by its name. Every entry of both formats (ACI, OCI
/// archive, OCI layer) is classified here before anything is written, so the rules for
/// names live in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EntryName {
    /// A file, directory or link at this relative path (`""`: the top directory itself).
    Path(String),
    /// An OCI whiteout `PARENT/.wh.NAME`: NAME, a plain file name, is to be removed.
    Whiteout { parent: String, name: String },
    /// An OCI opaque whiteout `PARENT/.wh..wh..opq`: PARENT is to be emptied.
    Opaque { parent: String },
}

/// The prefix of OCI whiteout names.
const WHITEOUT: &str = ".wh.";
/// The opaque whiteout's whole name.
const OPAQUE: &str = ".wh..wh..opq";

/// Classifies an entry by its name, refusing what no image may hold: an absolute path,
/// a `..` component, and a whiteout whose target is not a plain name (`.wh.` alone,
/// `.wh..`, `.wh...` would name the directory itself or its parent) or is one of the
/// reserved `.wh..wh.` names other than the opaque marker.
pub(crate) fn classify(path: &str) -> Result<EntryName, ImageError> {
    let bad = |why: &str| ImageError::Format(format!("entry {path:?} {why}"));
    if Path::new(path).components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(bad("is not a plain relative path"));
    }
    let (parent, name) = match path.rsplit_once('/') {
        Some((parent, name)) => (parent.to_string(), name),
        None => (String::new(), path),
    };
    let Some(hidden) = name.strip_prefix(WHITEOUT) else {
        return Ok(EntryName::Path(path.to_string()));
    };
    if name == OPAQUE {
        return Ok(EntryName::Opaque { parent });
    }
    if hidden.is_empty() || hidden == "." || hidden == ".." {
        return Err(bad("is a whiteout of no file (the name after .wh. is empty, . or ..)"));
    }
    if hidden.starts_with(WHITEOUT) {
        return Err(bad("uses a reserved .wh..wh. name"));
    }
    Ok(EntryName::Whiteout { parent, name: hidden.to_string() })
}

/// The classified name of an entry (see [`classify`]).
pub(crate) fn entry_name(entry: &tar::Entry<impl Read>) -> Result<EntryName, ImageError> {
    classify(&entry_path(entry)?)
}

/// Permission bits no image file keeps: set-user-ID and set-group-ID. An image decides
/// what its files contain, not who may run them with root's rights on the host (the
/// unpacked tree sits on the host's filesystem). The sticky bit (`/tmp`) stays.
pub const STRIPPED_MODE_BITS: u32 = 0o6000;

/// A tar reader that unpacks as an image needs: modes (less [`STRIPPED_MODE_BITS`]) and
/// times kept, existing files replaced (later layers win), no extended attributes, and
/// every file owned by the unpacking user (root when a host unpacks): an image's own
/// owners are not kept, so no file of a netplugin is writable by some other local uid.
pub(crate) fn archive<R: Read>(input: R) -> tar::Archive<R> {
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_preserve_ownerships(false);
    archive.set_mask(STRIPPED_MODE_BITS);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    archive
}

/// Unpacks one entry of an [`archive`] below `dest`: the one way any image entry reaches
/// the disk. The name is classified first (only a plain path is unpacked; whiteouts are
/// the layer reader's to apply) and the mode masked here again, whatever the archive was
/// set to (ownership is never kept: [`archive`] is the only reader). The tar crate refuses entries (and hard-link
/// targets) that would land outside `dest`, also through symbolic links unpacked earlier.
pub(crate) fn unpack_entry(entry: &mut tar::Entry<impl Read>, dest: &Path) -> Result<(), ImageError> {
    let path = match entry_name(entry)? {
        EntryName::Path(path) => path,
        EntryName::Whiteout { .. } | EntryName::Opaque { .. } => {
            let path = entry_path(entry)?;
            return Err(ImageError::Format(format!("entry {path:?} is a whiteout, not a file")));
        }
    };
    entry.set_mask(STRIPPED_MODE_BITS);
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
