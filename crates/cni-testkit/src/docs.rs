//! Reading the operator pages (`docs/plugins/`) in drift tests: the keys or flags a page
//! documents, and the flags a program's usage text names.
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

/// The flags a usage text names: those on its `usage:` line and those starting an indented
/// line (with `-a, --all` alternatives), without `-h`/`--help`. Prose lines that mention
/// the flag syntax are not indented, so they do not count.
pub fn usage_flags(usage: &str) -> BTreeSet<String> {
    let is_flag = |word: &str| {
        let name = word.trim_start_matches('-');
        word.starts_with('-')
            && name.len() + 2 >= word.len()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
    };
    let mut flags = BTreeSet::new();
    for line in usage.lines() {
        let words: Vec<&str> = if line.starts_with("usage:") {
            line.split_whitespace().filter(|w| is_flag(w)).collect()
        } else if line.starts_with(char::is_whitespace) {
            let mut leading = Vec::new();
            for word in line.split_whitespace() {
                let word = word.trim_end_matches(',');
                if !is_flag(word) {
                    break;
                }
                leading.push(word);
            }
            leading
        } else {
            Vec::new()
        };
        flags.extend(words.into_iter().filter(|w| !matches!(*w, "-h" | "--help")).map(str::to_string));
    }
    flags
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
    fn usage_flags_are_the_leading_words_of_indented_lines() {
        let usage = "usage: tool --must URL [options]
Does things; flags may also be written --flag or -flag=value.

  -socketpath PATH  a path
  --max-tcp N       a number, not -5
  -v, --verbose     louder
  -h, --help        this text
      continued description --not-a-flag";
        assert_eq!(usage_flags(usage), set(&["--max-tcp", "--must", "--verbose", "-socketpath", "-v"]));
    }

    #[test]
    fn table_keys_reads_one_section() {
        let page = "# p\n## Keys\n| key | type |\n|---|---|\n| `a.b[].c` | x |\n| plain | y |\n## Flags\n| `--x` | z |\n";
        assert_eq!(table_keys(page, "Keys"), set(&["a.b[].c"]));
        assert_eq!(table_keys(page, "Flags"), set(&["--x"]));
    }
}
