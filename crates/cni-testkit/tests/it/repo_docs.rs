//! The repository's documentation kept true: every repository path and link the pages name
//! exists (anchors included), docs/architecture.md's crate table is exactly the workspace,
//! and no comment or page cites a tracker number a reader of a clone cannot open.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::repo::{members, root as repo};

/// README.md and every page under docs/.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    pages.extend(
        files_under(&root.join("docs")).into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    pages
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let path = entry.path();
            let kind = entry.file_type().expect("file type");
            if kind.is_dir() {
                // Build output, fuzzing inputs and VCS data are not the project's text.
                let skip = ["target", "corpus", "artifacts", ".git"];
                if !skip.iter().any(|s| entry.file_name() == *s) {
                    pending.push(path);
                }
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The lines of `page` outside fenced code blocks.
fn prose_lines(page: &str) -> Vec<&str> {
    let mut fenced = false;
    page.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchors a Markdown renderer gives the page's headings: lower case, spaces to
/// hyphens, everything but letters, digits, `-` and `_` dropped.
fn anchors(page: &str) -> BTreeSet<String> {
    prose_lines(page)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// Targets of the page's Markdown links, `[text](target)`, but web addresses.
fn link_targets(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(page) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_string());
            }
            rest = &rest[end..];
        }
    }
    out
}

/// The top-level directories whose paths pages name as `crates/…`, `tools/…`.
const TOP_DIRS: [&str; 8] =
    ["crates/", "docs/", "tools/", "contrib/", "fuzz/", ".ci/", ".config/", ".cargo/"];

/// Repository paths named in the page's text (code blocks included: commands name files).
/// A path with a placeholder (`<hash>`, `*`, `{a,b}`, or an upper-case word such as
/// `TARGET`) names a pattern, not a file, and is left out.
fn named_paths(page: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_alphanumeric() || "/._-+<>*{},".contains(c);
    let mut out = Vec::new();
    for (start, _) in page.char_indices() {
        let before = page[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "/._-".contains(c)) {
            continue;
        }
        let Some(top) = TOP_DIRS.iter().find(|t| page[start..].starts_with(*t)) else { continue };
        let len = page[start..].find(|c: char| !is_path_char(c)).unwrap_or(page.len() - start);
        let path = page[start..start + len].trim_end_matches(['.', ',']);
        let placeholder = path.contains(['<', '*', '{'])
            || path.split('/').any(|part| part.len() > 1 && part.chars().all(|c| c.is_ascii_uppercase()));
        if path.len() > top.len() && !placeholder {
            out.push(path.to_string());
        }
    }
    out
}

#[test]
fn every_path_and_link_the_docs_name_exists() {
    let root = repo();
    let mut problems = Vec::new();
    for page_path in pages(&root) {
        let shown = page_path.strip_prefix(&root).unwrap().display().to_string();
        let page = std::fs::read_to_string(&page_path).unwrap();
        for path in named_paths(&page) {
            if !root.join(&path).exists() {
                problems.push(format!("{shown}: names {path}, which does not exist"));
            }
        }
        for target in link_targets(&page) {
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked =
                if file.is_empty() { page_path.clone() } else { page_path.parent().unwrap().join(file) };
            if !linked.exists() {
                problems.push(format!("{shown}: links to {target}, which does not exist"));
            } else if !anchor.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&linked).unwrap();
                if !anchors(&text).contains(anchor) {
                    problems.push(format!("{shown}: links to {target}, a heading that page does not have"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "the docs name what is not there:\n{}", problems.join("\n"));
}

/// Package names of the workspace's members: each manifest's `name` under `[package]`.
fn workspace_packages(root: &Path) -> BTreeSet<String> {
    members(root)
        .iter()
        .map(|member| {
            let package = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
            let section = package.split_once("[package]").expect("a [package] section").1;
            let name = section.lines().find_map(|l| l.strip_prefix("name = ")).expect("a package name");
            name.trim_matches('"').to_string()
        })
        .collect()
}

/// The crates docs/architecture.md's "Crates" table lists: its rows' first cells.
fn architecture_crates(page: &str) -> BTreeSet<String> {
    let section = page.split("\n## ").find(|s| s.starts_with("Crates\n")).expect("a Crates section");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .collect()
}

#[test]
fn the_architecture_crate_table_is_exactly_the_workspace() {
    let root = repo();
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let (listed, members) = (architecture_crates(&page), workspace_packages(&root));
    let missing: Vec<_> = members.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&members).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's crate table: missing {missing:?}, not in the workspace {extra:?}"
    );
}

/// Where `text` cites a tracker number ("issue" or "issues", then a number, `#` allowed):
/// such a number means nothing to a reader of a clone; the goal it stood for is named instead.
fn cites_issue_number(text: &str) -> Option<&str> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("issue") {
        let start = from + at;
        let rest = lower[start + 5..].strip_prefix('s').unwrap_or(&lower[start + 5..]);
        let rest = rest.trim_start_matches(' ').trim_start_matches('#');
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let end =
                lower.len() - rest.len() + rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            return Some(&text[start..end]);
        }
        from = start + 5;
    }
    None
}

#[test]
fn no_source_or_page_cites_an_issue_number() {
    let root = repo();
    let mut files = pages(&root);
    for dir in ["crates", "tools", ".ci", "fuzz", "contrib"] {
        files.extend(files_under(&root.join(dir)));
    }
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for (number, line) in text.lines().enumerate() {
            if let Some(citation) = cites_issue_number(line) {
                let shown = file.strip_prefix(&root).unwrap().display();
                found.push(format!("{shown}:{}: {citation:?}", number + 1));
            }
        }
    }
    assert!(found.is_empty(), "name the goal, not the tracker number:\n{}", found.join("\n"));
}

#[test]
fn the_checks_find_what_they_look_for() {
    // The word is joined at run time so that this file does not cite anything itself.
    let (upper, lower) = (["Iss", "ue"].concat(), ["iss", "ue"].concat());
    let (first, second) = (format!("as {upper} 23 found"), format!("({lower}s #7, 8)"));
    assert_eq!(cites_issue_number(&first), Some(&first[3..11]));
    assert_eq!(cites_issue_number(&second), Some(&second[1..10]));
    assert_eq!(cites_issue_number("an issue with 3 parts; the issuer"), None);
    assert_eq!(
        named_paths("see `crates/cni-os/src/lib.rs`, tools/test. Not fuzz/artifacts/TARGET/ or x/crates/y"),
        ["crates/cni-os/src/lib.rs", "tools/test"]
    );
    assert_eq!(link_targets("[a](b.md#c) and [web](https://x.y/z)"), ["b.md#c"]);
    let page = "# Top\n```\n# not a heading\n```\n## Kubernetes: containerd's CRI (and so `kubelet`)\n";
    let want: BTreeSet<String> =
        ["top", "kubernetes-containerds-cri-and-so-kubelet"].map(String::from).into();
    assert_eq!(anchors(page), want);
    let table = "x\n## Crates\n\n| crate | what |\n|---|---|\n| `a` | one |\n| `b-c` | two |\n\n## Next\n| `z` | no |";
    assert_eq!(architecture_crates(table), ["a", "b-c"].map(String::from).into());
    let members = workspace_packages(&repo());
    assert!(members.contains("cni-testkit") && members.contains("libcni"), "{members:?}");
}
