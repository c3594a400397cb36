//! Unknown keys in a plugin object, against the keys the plugin's configuration types
//! accept (`cni_plugins::keys`), with a did-you-mean.

use serde_json::Value;
use std::collections::BTreeSet;

/// The keys one plugin object may hold: the plugin's own, its IPAM plugin's, the common
/// ones; and the open paths, below which anything goes.
pub struct Known {
    pub keys: BTreeSet<String>,
    pub open: BTreeSet<String>,
}

impl Known {
    fn is_open(&self, pattern: &str) -> bool {
        self.open.iter().any(|open| {
            pattern == open
                || pattern.strip_prefix(open.as_str()).is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }

    /// The known keys right below `parent` (a pattern), by their last segment.
    fn children<'a>(&'a self, parent: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.keys.iter().filter_map(move |key| match key.rsplit_once('.') {
            Some((p, leaf)) if p == parent => Some(leaf),
            None if parent.is_empty() => Some(key.as_str()),
            _ => None,
        })
    }
}

/// What is wrong, or worth knowing, about one key.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyNote {
    /// Not read by the plugin; maybe a typo of `suggestion` (a full key path).
    Unknown { path: String, suggestion: Option<String> },
    /// Read (keys match case-insensitively, like the reference's decoder), but documented
    /// as `documented`.
    Case { path: String, documented: String },
}

/// Walks `plugin` (a plugin object) and notes every key `known` does not accept.
pub fn check(plugin: &serde_json::Map<String, Value>, known: &Known) -> Vec<KeyNote> {
    let mut notes = Vec::new();
    walk_object(plugin, "", "", known, &mut notes);
    notes
}

/// `pattern` is the path in the key lists' notation (`ipam.ranges[][]`), `concrete` the
/// same path with indices (`ipam.ranges[0][1]`), for the report.
fn walk(value: &Value, pattern: &str, concrete: &str, known: &Known, notes: &mut Vec<KeyNote>) {
    match value {
        Value::Object(map) => walk_object(map, pattern, concrete, known, notes),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{pattern}[]"), &format!("{concrete}[{i}]"), known, notes);
            }
        }
        _ => {}
    }
}

fn walk_object(
    map: &serde_json::Map<String, Value>,
    pattern: &str,
    concrete: &str,
    known: &Known,
    notes: &mut Vec<KeyNote>,
) {
    if known.is_open(pattern) {
        return;
    }
    let join =
        |base: &str, key: &str| if base.is_empty() { key.to_string() } else { format!("{base}.{key}") };
    for (key, value) in map {
        let path = join(concrete, key);
        let exact = join(pattern, key);
        if known.keys.contains(&exact) || known.is_open(&exact) {
            walk(value, &exact, &path, known, notes);
            continue;
        }
        if let Some(documented) = known.children(pattern).find(|k| k.eq_ignore_ascii_case(key)) {
            let documented_pattern = join(pattern, documented);
            notes.push(KeyNote::Case { path: path.clone(), documented: join(concrete, documented) });
            walk(value, &documented_pattern, &path, known, notes);
            continue;
        }
        let suggestion = nearest(key, known.children(pattern))
            .map(|k| join(concrete, k))
            .or_else(|| elsewhere(key, known));
        notes.push(KeyNote::Unknown { path, suggestion });
    }
}

/// Keys longer than this get no did-you-mean.
const MAX_SUGGESTED_KEY: usize = 64;

/// The sibling key closest to `key` by edit distance (case-insensitive), if close enough
/// to be a typo of it.
fn nearest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    // No key is this long: a typo of one is not either, and the distance costs its length.
    if key.len() > MAX_SUGGESTED_KEY {
        return None;
    }
    let key_lower = key.to_ascii_lowercase();
    let limit = match key.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .map(|c| (edit_distance(&key_lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// A known key of the same name at another level (`subnet` written beside `type` rather
/// than inside `ipam`), as its pattern path; only when exactly one exists and it has no
/// list in its path (an index could not be filled in).
fn elsewhere(key: &str, known: &Known) -> Option<String> {
    let mut found = known.keys.iter().filter(|k| {
        !k.contains("[]") && k.rsplit('.').next().is_some_and(|leaf| leaf.eq_ignore_ascii_case(key))
    });
    match (found.next(), found.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and
/// transpositions of neighbours each cost one (`mut` → `mtu` is one typo, not two).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn known() -> Known {
        let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Known {
            keys: set(&[
                "mtu",
                "isGateway",
                "ipam",
                "ipam.type",
                "ipam.subnet",
                "ipam.ranges",
                "ipam.ranges[][].subnet",
                "ipam.routes",
            ]),
            open: set(&["capabilities", "ipam.routes[]"]),
        }
    }

    fn notes(value: serde_json::Value) -> Vec<KeyNote> {
        check(value.as_object().unwrap(), &known())
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("mtu", "mtu"), 0);
        assert_eq!(edit_distance("mut", "mtu"), 1);
        assert_eq!(edit_distance("isgatway", "isgateway"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn typos_case_and_misplaced_keys() {
        let found = notes(json!({
            "mut": 1400,
            "ISGATEWAY": true,
            "subnet": "10.0.0.0/24",
            "capabilities": {"anything": true},
            "ipam": {"type": "x", "ranges": [[{"subnt": "10.0.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]},
            "frobnicate": 1,
        }));
        assert_eq!(
            found,
            vec![
                KeyNote::Unknown { path: "mut".into(), suggestion: Some("mtu".into()) },
                KeyNote::Case { path: "ISGATEWAY".into(), documented: "isGateway".into() },
                KeyNote::Unknown { path: "subnet".into(), suggestion: Some("ipam.subnet".into()) },
                KeyNote::Unknown {
                    path: "ipam.ranges[0][0].subnt".into(),
                    suggestion: Some("ipam.ranges[0][0].subnet".into())
                },
                KeyNote::Unknown { path: "frobnicate".into(), suggestion: None },
            ]
        );
    }
}
