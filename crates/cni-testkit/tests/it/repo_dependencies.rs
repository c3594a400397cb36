//! Every dependency a workspace member declares is used by its code, and every third-party
//! version is set once, in the root Cargo.toml. A dependency nothing names costs build time
//! and audit surface; this is the same check `cargo machete` makes (a crate is used when
//! its code names it), run with the suite so CI fails on one without installing a tool.

use std::path::{Path, PathBuf};

use crate::repo::{members, root as repo};

/// One `name = ...` / `name.workspace = true` line of a dependency table.
struct Declared {
    name: String,
    line: String,
}

/// The dependencies of every `[*dependencies]` table of a manifest.
fn declared(manifest: &str) -> Vec<Declared> {
    let mut in_table = false;
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line.trim_matches(['[', ']']).ends_with("dependencies");
            continue;
        }
        if !in_table || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line.split(['=', '.']).next().unwrap().trim();
        out.push(Declared { name: key.to_string(), line: line.to_string() });
    }
    out
}

/// Names listed under `[package.metadata.cargo-machete] ignored` (used in a way no source
/// line shows, e.g. only to pick a feature of another crate).
fn ignored(manifest: &str) -> Vec<String> {
    let Some((_, section)) = manifest.split_once("[package.metadata.cargo-machete]") else { return vec![] };
    let list =
        section.split_once("ignored = [").map(|(_, l)| &l[..l.find(']').unwrap_or(l.len())]).unwrap_or("");
    list.split('"').skip(1).step_by(2).map(String::from).collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                if entry.file_name() != "target" {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Whether `code` names the crate `ident`: a path through it (`ident::`) or a `use` /
/// `extern crate` of it, not as the tail of a longer name.
fn names_crate(code: &str, ident: &str) -> bool {
    let mut from = 0;
    while let Some(at) = code[from..].find(ident) {
        let start = from + at;
        let end = start + ident.len();
        let before = code[..start].chars().next_back();
        let whole = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        let after = &code[end..];
        let used = after.starts_with("::")
            || (after.starts_with([';', ' ', ',', '}', '{']) && {
                let head = code[..start].trim_end();
                head.ends_with("use") || head.ends_with("extern crate") || head.ends_with('{')
            });
        if whole && used {
            return true;
        }
        from = end;
    }
    false
}

#[test]
fn every_declared_dependency_is_used() {
    let root = repo();
    let mut unused = Vec::new();
    for member in members(&root) {
        let manifest = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
        let code: String = rust_files(&member).iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
        let skip = ignored(&manifest);
        for dep in declared(&manifest) {
            if !skip.contains(&dep.name) && !names_crate(&code, &dep.name.replace('-', "_")) {
                unused.push(format!("{}: {}", member.strip_prefix(&root).unwrap().display(), dep.name));
            }
        }
    }
    assert!(unused.is_empty(), "declared but never named by the crate's code:\n{}", unused.join("\n"));
}

#[test]
fn third_party_versions_are_set_once_in_the_root_manifest() {
    let root = repo();
    let mut local = Vec::new();
    for member in members(&root) {
        let manifest = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
        for dep in declared(&manifest).into_iter().filter(|d| !d.line.contains("workspace = true")) {
            local.push(format!("{}: {}", member.strip_prefix(&root).unwrap().display(), dep.line));
        }
    }
    assert!(local.is_empty(), "versions belong in [workspace.dependencies]:\n{}", local.join("\n"));
}

#[test]
fn the_checks_see_use_and_disuse() {
    assert!(names_crate("use serde::Deserialize;", "serde"));
    assert!(names_crate("fn f() { let v = serde_json::json!({}); }", "serde_json"));
    assert!(names_crate("use {cni_os, std};", "cni_os"));
    assert!(names_crate("extern crate libc;", "libc"));
    assert!(!names_crate("use serde_json::Value;", "serde"));
    assert!(!names_crate("let my_libc = 1; // libc is not here", "libc"));
    assert!(!names_crate("use cni_testkit::libc::x;", "libc"));
    let manifest = "[package]\nname = \"x\"\n[dependencies]\n# why\na.workspace = true\nb-c = { workspace = true, features = [\"f\"] }\n[dev-dependencies]\nd = \"1\"\n[lints]\nworkspace = true\n";
    let names: Vec<_> = declared(manifest).into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["a", "b-c", "d"]);
    assert_eq!(ignored("[package.metadata.cargo-machete]\nignored = [\"prost\", \"x\"]\n"), ["prost", "x"]);
}
