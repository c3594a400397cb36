//! The repository as the repo_* checks read it: its root and its workspace's members.

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// The member directories named in the root Cargo.toml's `members = [...]` (written one
/// quoted path per entry, so no TOML parser is needed for this).
pub fn members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let list = manifest.split_once("members = [").expect("workspace members").1;
    let list = &list[..list.find(']').expect("the members list ends")];
    list.split('"').skip(1).step_by(2).map(|m| root.join(m)).collect()
}
