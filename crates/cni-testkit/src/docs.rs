//! Reading the operator pages (`docs/plugins/`) in drift tests: the keys or flags a page
//! documents, against what the code reads or parses.
//!
//! A page documents a key (or a flag) as the first cell of a table row under a `## `
//! heading, in backticks: `` | `ipam.ranges[][].subnet` | string | ... | ``. The section
//! runs to the next `## ` heading.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's `docs/plugins` directory, from a crate's manifest directory.
pub fn plugin_docs_dir(manifest_dir: &str) -> PathBuf {
    Path::new(manifest_dir).join("../../docs/plugins")
}

/// A page of `docs/plugins`, or an error naming its path.
pub fn read_page(manifest_dir: &str, name: &str) -> Result<String, String> {
    let path = plugin_docs_dir(manifest_dir).join(name);
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The backticked first cells of the table rows under `## {heading}`.
pub fn table_keys(page: &str, heading: &str) -> BTreeSet<String> {
    let mut inside = false;
    let mut keys = BTreeSet::new();
    for line in page.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = title.trim() == heading;
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|').filter(|_| inside) else { continue };
        let first = row.split('|').next().unwrap_or("").trim();
        if let Some(key) = first.strip_prefix('`').and_then(|k| k.strip_suffix('`')) {
            keys.insert(key.to_string());
        }
    }
    keys
}

/// The long flags `command` parses, each spelt with `dashes` (`--` for clap's own spelling,
/// `-` for a Go-style drop-in binary).
pub fn command_flags(command: &cni_cli::clap::Command, dashes: &str) -> BTreeSet<String> {
    command.get_arguments().filter_map(|a| a.get_long()).map(|long| format!("{dashes}{long}")).collect()
}

/// Asserts that the page `page_name` of `docs/plugins` documents exactly the flags of
/// `command` under `## Flags` (spelt with `dashes`), naming every one missing or extra.
pub fn assert_page_documents_exactly_the_flags(
    manifest_dir: &str,
    page_name: &str,
    command: &cni_cli::clap::Command,
    dashes: &str,
) {
    let page = read_page(manifest_dir, page_name).unwrap();
    let documented = table_keys(&page, "Flags");
    let problems = compare(page_name, "flag", &command_flags(command, dashes), &documented);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Differences between what a program names and what its page documents, as lines.
pub fn compare(page_name: &str, what: &str, code: &BTreeSet<String>, page: &BTreeSet<String>) -> Vec<String> {
    let missing = code.difference(page).map(|k| format!("{page_name}: {what} `{k}` is not documented"));
    let extra = page
        .difference(code)
        .map(|k| format!("{page_name}: documents {what} `{k}`, which the code does not have"));
    missing.chain(extra).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table_keys_reads_one_section() {
        let page = "# p\n## Keys\n| key | type |\n|---|---|\n| `a.b[].c` | x |\n| plain | y |\n## Flags\n| `--x` | z |\n";
        assert_eq!(table_keys(page, "Keys"), set(&["a.b[].c"]));
        assert_eq!(table_keys(page, "Flags"), set(&["--x"]));
    }
}
