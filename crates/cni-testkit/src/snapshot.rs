//! Before/after snapshots of everything a plugin could change, to prove a refused request
//! changed nothing ("bad input gets a clear error and changes nothing").
//!
//! A [`Scope`] names what to look at: network namespaces (links, addresses, routes of every
//! table, policy rules, qdiscs and the nftables ruleset, each read with the kernel's own
//! tools as an oracle: `ip -j`, `tc -j`, `nft -j`) and directories (every entry's path,
//! kind, mode and content). [`Scope::take`] reads them all into a [`Snapshot`];
//! [`Snapshot::diff`] lists what differs between two, one line per changed section.

use crate::ns::TestNetns;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Keys whose values change by themselves over time (counters, lifetimes, timers): they
/// are dropped, so a snapshot differs only when something was changed.
const VOLATILE_KEYS: &[&str] = &[
    "stats",
    "stats64",
    "valid_life_time",
    "preferred_life_time",
    "expires",
    "used",
    "lastuse",
    // A bridge's and its ports' running timers.
    "hello_timer",
    "tcn_timer",
    "topology_change_timer",
    "gc_timer",
    "message_age_timer",
    "forward_delay_timer",
    "hold_timer",
];

/// What a namespace snapshot reads: one `ip -batch` per family (one process for several
/// dumps keeps a snapshot cheap enough to take around every case of a corpus), then the
/// qdiscs and the nftables ruleset. Each entry: program, arguments, batch lines, and the
/// section names of the JSON documents it prints, in order.
type NetnsRead = (&'static str, &'static [&'static str], &'static str, &'static [&'static str]);
const NETNS_READS: &[NetnsRead] = &[
    (
        "ip",
        &["-j", "-d", "-batch", "-"],
        "link show\naddress show\nroute show table all\nrule show\nneighbour show nud permanent\n",
        &["links", "addresses", "routes4", "rules4", "neighbours"],
    ),
    ("ip", &["-6", "-j", "-batch", "-"], "route show table all\nrule show\n", &["routes6", "rules6"]),
    ("tc", &["-j", "qdisc", "show"], "", &["qdiscs"]),
    ("nft", &["-j", "list", "ruleset"], "", &["nftables"]),
];

/// What to snapshot.
#[derive(Default)]
pub struct Scope<'a> {
    namespaces: Vec<(String, &'a TestNetns)>,
    dirs: Vec<(String, PathBuf)>,
}

impl<'a> Scope<'a> {
    pub fn new() -> Scope<'a> {
        Scope::default()
    }

    /// Adds namespace `ns`, labelled `label` in diffs.
    pub fn netns(mut self, label: &str, ns: &'a TestNetns) -> Scope<'a> {
        self.namespaces.push((label.to_string(), ns));
        self
    }

    /// Adds the tree under `path` (which may not exist yet), labelled `label` in diffs.
    pub fn dir(mut self, label: &str, path: impl AsRef<Path>) -> Scope<'a> {
        self.dirs.push((label.to_string(), path.as_ref().to_path_buf()));
        self
    }

    /// Reads everything in scope now.
    pub fn take(&self) -> Snapshot {
        let mut sections = BTreeMap::new();
        for (label, ns) in &self.namespaces {
            for (program, args, batch, names) in NETNS_READS {
                let documents = read_netns(ns, program, args, batch);
                assert_eq!(documents.len(), names.len(), "{program} {args:?} printed {documents:?}");
                for (name, document) in names.iter().zip(documents) {
                    sections.insert(format!("{label}/{name}"), document);
                }
            }
        }
        for (label, path) in &self.dirs {
            sections.insert(format!("dir {label}"), read_tree(path));
        }
        Snapshot { sections }
    }
}

/// Runs `program args` in `ns` with `batch` on stdin; each JSON document it printed,
/// without volatile keys, as compact text (empty output is one empty list).
fn read_netns(ns: &TestNetns, program: &str, args: &[&str], batch: &str) -> Vec<String> {
    let mut command = ns.command(program);
    command.args(args);
    let what = format_args!("{program} {args:?} in {}", ns.name());
    let out = crate::runner::run_within(&mut command, batch.as_bytes(), crate::runner::DEFAULT_LIMIT, what);
    assert!(
        out.status.success(),
        "{program} {args:?} in {} failed: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return vec!["[]".to_string()];
    }
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|document| {
            let mut value = document.unwrap_or_else(|e| {
                panic!("{program} {args:?} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
            });
            strip_volatile(&mut value);
            value.to_string()
        })
        .collect()
}

fn strip_volatile(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !VOLATILE_KEYS.contains(&k.as_str()));
            map.values_mut().for_each(strip_volatile);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

/// One line per entry under `root`, sorted: relative path, kind, mode, and for files the
/// size and a content hash (symlinks: their target).
fn read_tree(root: &Path) -> String {
    let mut lines = Vec::new();
    walk(root, root, &mut lines);
    lines.sort();
    if lines.is_empty() && !root.exists() {
        return "(absent)".to_string();
    }
    lines.join("\n")
}

fn walk(root: &Path, dir: &Path, lines: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            lines.push(format!("{rel}/ dir {mode:o}"));
            walk(root, &path, lines);
        } else if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
            lines.push(format!("{rel} -> {target}"));
        } else {
            let content = fs::read(&path).unwrap_or_default();
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            content.hash(&mut hasher);
            lines.push(format!("{rel} file {mode:o} {} bytes #{:016x}", content.len(), hasher.finish()));
        }
    }
}

/// Everything a [`Scope`] read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    sections: BTreeMap<String, String>,
}

impl Snapshot {
    /// The sections that differ from `later`, each with the entries that went (`-`) and
    /// came (`+`): the elements of a JSON list (a link, an address, a route), the lines of
    /// a directory tree, or else the whole text.
    pub fn diff(&self, later: &Snapshot) -> Vec<String> {
        let mut keys: Vec<&String> = self.sections.keys().chain(later.sections.keys()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter_map(|key| {
                let (before, after) = (self.sections.get(key), later.sections.get(key));
                (before != after).then(|| {
                    let text = |s: Option<&String>| s.map_or("(not read)", String::as_str).to_string();
                    let (before, after) = (entries(&text(before)), entries(&text(after)));
                    let mut lines = vec![format!("{key} changed:")];
                    lines.extend(before.iter().filter(|e| !after.contains(e)).map(|e| format!("  - {e}")));
                    lines.extend(after.iter().filter(|e| !before.contains(e)).map(|e| format!("  + {e}")));
                    lines.join("\n")
                })
            })
            .collect()
    }

    /// The text of one section (e.g. `host/links`, `dir ipam`), for tests that look closer.
    pub fn section(&self, key: &str) -> Option<&str> {
        self.sections.get(key).map(String::as_str)
    }
}

/// The entries of a section's text, for [`Snapshot::diff`].
fn entries(text: &str) -> Vec<String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items.iter().map(Value::to_string).collect(),
        Ok(_) => vec![text.to_string()],
        Err(_) => text.lines().map(str::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_keys_go_at_every_depth() {
        let mut v = serde_json::json!([{"ifname": "lo", "stats64": {"rx": 1},
            "addr_info": [{"local": "::1", "valid_life_time": 5, "preferred_life_time": 4}]}]);
        strip_volatile(&mut v);
        assert_eq!(v, serde_json::json!([{"ifname": "lo", "addr_info": [{"local": "::1"}]}]));
    }

    #[test]
    fn a_tree_change_is_a_diff() {
        let dir = tempfile::tempdir().unwrap();
        let scope = Scope::new().dir("d", dir.path()).dir("missing", dir.path().join("nope"));
        let empty = scope.take();
        assert_eq!(empty.section("dir missing"), Some("(absent)"));
        assert!(empty.diff(&scope.take()).is_empty());
        fs::create_dir(dir.path().join("net")).unwrap();
        fs::write(dir.path().join("net/10.0.0.2"), "ctr\neth0").unwrap();
        let one = scope.take();
        let diff = empty.diff(&one);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(
            diff[0].starts_with("dir d changed") && diff[0].contains("\n  + net/10.0.0.2 file"),
            "{diff:?}"
        );
        assert!(!diff[0].contains("  - "), "only what came: {diff:?}");
        // Same name, other content: still a change.
        fs::write(dir.path().join("net/10.0.0.2"), "ctr\neth1").unwrap();
        assert_eq!(one.diff(&scope.take()).len(), 1);
    }
}
