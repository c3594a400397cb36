//! Every workspace member is held to the workspace's lints, so a new crate cannot slip out
//! of them (with it, out of the `unsafe_code = "forbid"` that keeps unsafe code in cni-os).
//! cni-os, the one crate allowed unsafe blocks, has a table of its own: the workspace's
//! lints with `unsafe_code` at `deny` (allowed block by block), and nothing else different.

use std::path::Path;

use crate::repo::{members, root};

/// The crate whose `[lints]` may differ from the workspace's, and only in `unsafe_code`.
const UNSAFE_HOME: &str = "crates/cni-os";

/// The `key = value` lines of table `[name]` in `manifest` (comments and blank lines
/// dropped, spaces trimmed); `None` when there is no such table.
fn table(manifest: &str, name: &str) -> Option<Vec<String>> {
    let header = format!("[{name}]");
    let mut lines = manifest.lines().map(str::trim);
    lines.find(|l| *l == header)?;
    let entries = lines
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    Some(entries)
}

/// The names of every `[lints...]` table of `manifest`.
fn lint_tables(manifest: &str) -> Vec<String> {
    let headers = manifest.lines().map(str::trim).filter(|l| l.starts_with("[lints"));
    headers.map(|l| l.trim_matches(['[', ']']).to_string()).collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_member_inherits_the_workspace_lints() {
    let root = root();
    let workspace = read(&root.join("Cargo.toml"));
    let rust = table(&workspace, "workspace.lints.rust").expect("[workspace.lints.rust]");
    let clippy = table(&workspace, "workspace.lints.clippy").expect("[workspace.lints.clippy]");
    assert!(rust.contains(&r#"unsafe_code = "forbid""#.to_string()), "workspace lints: {rust:?}");
    let mut wrong = Vec::new();
    for member in members(&root) {
        let manifest = read(&member.join("Cargo.toml"));
        let name = member.strip_prefix(&root).unwrap().display().to_string();
        if name == UNSAFE_HOME {
            let unsafe_denied: Vec<String> =
                rust.iter()
                    .map(|l| {
                        if l.starts_with("unsafe_code ") {
                            r#"unsafe_code = "deny""#.into()
                        } else {
                            l.clone()
                        }
                    })
                    .collect();
            let tables = lint_tables(&manifest);
            if tables != ["lints.rust", "lints.clippy"]
                || table(&manifest, "lints.rust") != Some(unsafe_denied)
                || table(&manifest, "lints.clippy") != Some(clippy.clone())
            {
                wrong.push(format!("{name}: its [lints.rust] and [lints.clippy] must be the workspace's with unsafe_code = \"deny\""));
            }
        } else if lint_tables(&manifest) != ["lints"]
            || table(&manifest, "lints") != Some(vec!["workspace = true".to_string()])
        {
            wrong.push(format!(
                "{name}: needs `[lints]` with `workspace = true` and no lint table of its own"
            ));
        }
    }
    assert!(wrong.is_empty(), "members outside the workspace lints:\n{}", wrong.join("\n"));
}

#[test]
fn the_check_notices_a_member_that_leaves_the_lints() {
    let inherits = "[package]\nname = \"x\"\n\n[lints]\nworkspace = true\n";
    assert_eq!(table(inherits, "lints"), Some(vec!["workspace = true".to_string()]));
    let own = "[package]\nname = \"x\"\n\n[lints.rust]\nunsafe_code = \"allow\"\n";
    assert_eq!(lint_tables(own), ["lints.rust"]);
    assert_eq!(table("[package]\nname = \"x\"\n", "lints"), None);
}
