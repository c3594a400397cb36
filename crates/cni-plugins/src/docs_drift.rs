//! The drift test between the plugins' configuration types and `docs/plugins/`.
//!
//! Each plugin's accepted keys are read from the serde types its code parses stdin into
//! ([`crate::keys`] records the field names serde asks for, nested ones
//! included); a value the code parses out of a sub-object (`runtimeConfig.bandwidth`,
//! `args.cni`) is recorded at that path, mirroring the `parse_value` call. The keys every
//! plugin shares (`cniVersion`, `name`, `type`, `ipam.type`, `dns`, ...) are documented once,
//! in `docs/plugins/README.md`, and checked there against `cni_types::NetConf`.
//!
//! A page documents a key as the first cell of a row of the table under its `## Keys`
//! heading, in backticks: `` | `ipam.ranges[][].subnet` | string | ... | ``. `.` separates
//! an object and its key, `[]` stands for a list's elements. A path whose value is read as
//! a map (a flattened catch-all, a map of sysctls) is open: the page may document keys
//! below it (`ipam.routes[].dst`) without the types naming them.
//!
//! Not covered: CNI_ARGS names (read from the environment by name, documented in each
//! page's CNI_ARGS section).

use crate::keys::{common_keys, Keys};
use cni_sdk::catalog::Catalog;
use cni_testkit::docs;
use std::collections::BTreeSet;

/// What differs between the code's keys and a page's, as readable lines (empty: none).
fn drift(
    page_name: &str,
    code: &Keys,
    documented: &BTreeSet<String>,
    common: &BTreeSet<String>,
) -> Vec<String> {
    let expected: BTreeSet<&String> = code.keys.iter().filter(|k| !common.contains(*k)).collect();
    let below_open = |key: &str| code.open.iter().any(|open| key.starts_with(&format!("{open}.")));
    let mut problems = Vec::new();
    for key in expected.iter().filter(|k| !documented.contains(**k)) {
        problems.push(format!(
            "{page_name}: the code accepts `{key}` but the page's Keys table does not document it"
        ));
    }
    for key in documented.iter().filter(|k| !expected.contains(k) && !below_open(k)) {
        let why =
            if common.contains(key) { " (it is a common key: document it in README.md only)" } else { "" };
        problems
            .push(format!("{page_name}: the page documents `{key}`, which the code does not accept{why}"));
    }
    problems
}

/// Every plugin with a page: the multi-call binary's, etcd-ipam's and dhcp's (binaries of
/// their own, dev-dependencies here so that one test keeps every page in step).
fn catalog() -> Catalog {
    Catalog::new(&[crate::registry::catalog(), cni_etcd_ipam::catalog(), cni_dhcp::catalog()])
}

/// The keys plugin `name` reads, whichever crate it is built in.
fn plugin_keys(name: &str) -> Option<Keys> {
    catalog().find(name).map(|entry| (entry.keys)())
}

fn read_page(name: &str) -> Result<String, String> {
    docs::read_page(env!("CARGO_MANIFEST_DIR"), name)
}

fn documented_keys(page: &str) -> BTreeSet<String> {
    docs::table_keys(page, "Keys")
}

#[test]
fn every_plugin_page_documents_exactly_the_keys_the_code_accepts() {
    let common = common_keys();
    let mut problems = Vec::new();
    for entry in catalog().entries() {
        let (name, code) = (entry.name, (entry.keys)());
        match read_page(&format!("{name}.md")) {
            Ok(page) => {
                problems.extend(drift(&format!("{name}.md"), &code, &documented_keys(&page), &common))
            }
            Err(e) => problems.push(e),
        }
    }
    assert!(problems.is_empty(), "docs/plugins drifted from the code:\n{}", problems.join("\n"));
}

#[test]
fn the_index_documents_exactly_the_common_keys() {
    let common = common_keys();
    let page = read_page("README.md").unwrap();
    let code = Keys { keys: common.clone(), open: BTreeSet::new() };
    let problems = drift("README.md", &code, &documented_keys(&page), &BTreeSet::new());
    assert!(
        problems.is_empty(),
        "docs/plugins/README.md drifted from cni_types::NetConf:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_comparison_catches_both_directions() {
    let code = Keys {
        keys: ["mtu", "name", "vlanTrunk", "vlanTrunk[].id"].iter().map(|s| s.to_string()).collect(),
        open: ["routes[]".to_string()].into(),
    };
    let common: BTreeSet<String> = ["name".to_string()].into();
    let page = "# x\n## Keys\n| key | type |\n|---|---|\n| `mtu` | integer |\n| `vlanTrunk` | list |\n\
                | `routes[].dst` | string |\n| `stale` | bool |\n## Example\n| `vlanTrunk[].id` | not a key row |\n";
    let problems = drift("x.md", &code, &documented_keys(page), &common);
    assert_eq!(
        problems,
        [
            "x.md: the code accepts `vlanTrunk[].id` but the page's Keys table does not document it",
            "x.md: the page documents `stale`, which the code does not accept",
        ]
    );
}

/// The JSON of the first ```json block under `## Example`.
fn example(page: &str) -> Option<serde_json::Value> {
    let section = page.split("\n## Example").nth(1)?;
    let block = section.split("```json\n").nth(1)?.split("\n```").next()?;
    serde_json::from_str(block).ok()
}

/// The leaf key paths of a JSON object, in the Keys tables' notation (`a.b[].c`); a list of
/// plain values is one leaf.
fn leaf_paths(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    use serde_json::Value;
    let below = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    match value {
        Value::Object(map) if !map.is_empty() => map.iter().for_each(|(k, v)| leaf_paths(v, &below(k), out)),
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            items.iter().for_each(|item| leaf_paths(item, &format!("{path}[]"), out))
        }
        _ => out.push(path.to_string()),
    }
}

/// Each plugin page's example is a conflist whose every plugin passes that plugin's own
/// validation (as an ADD does before touching anything) and uses only keys the code reads:
/// an example cannot rot either.
#[test]
fn every_example_is_a_valid_conflist_using_only_real_keys() {
    let common = common_keys();
    let mut problems = Vec::new();
    let catalog = catalog();
    for name in catalog.entries().map(|entry| entry.name) {
        let page_name = format!("{name}.md");
        let Some(list) = read_page(&page_name).ok().as_deref().and_then(example) else {
            problems.push(format!("{page_name}: no JSON example under ## Example"));
            continue;
        };
        let plugins = list["plugins"].as_array().cloned().unwrap_or_default();
        if !plugins.iter().any(|p| p["type"] == name || p["ipam"]["type"] == name) {
            problems.push(format!("{page_name}: the example does not use {name}"));
        }
        for plugin in plugins {
            let mut conf = plugin.clone();
            conf["name"] = list["name"].clone();
            conf["cniVersion"] = list["cniVersion"].clone();
            let plugin_type = conf["type"].as_str().unwrap_or_default().to_string();
            let ipam_type = conf["ipam"]["type"].as_str().map(str::to_string);
            let version = cni_sdk::Version::parse(list["cniVersion"].as_str().unwrap_or_default()).unwrap();
            let serde_json::Value::Object(conf) = conf else { unreachable!("a plugin object") };
            match crate::dry_run::check_add(&catalog, &plugin_type, &conf, version) {
                None => {
                    problems.push(format!("{page_name}: example plugin type {plugin_type:?} is not ours"))
                }
                Some(Err(e)) => {
                    problems.push(format!("{page_name}: example {plugin_type} is refused: {}", e.msg))
                }
                Some(Ok(())) => {}
            }
            let mut known = plugin_keys(&plugin_type).unwrap_or_default();
            if let Some(ipam) = ipam_type.as_deref().and_then(plugin_keys) {
                known.merge(ipam);
            }
            let mut paths = Vec::new();
            leaf_paths(&plugin, "", &mut paths);
            for path in paths {
                let open = |p: &str| {
                    known
                        .open
                        .iter()
                        .chain(["capabilities".to_string()].iter())
                        .any(|o| p.starts_with(&format!("{o}.")) || p == o)
                };
                if !known.keys.contains(&path) && !common.contains(&path) && !open(&path) {
                    problems.push(format!(
                        "{page_name}: the example's {plugin_type} uses `{path}`, which no code reads"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "docs/plugins examples:\n{}", problems.join("\n"));
}
