//! What a test's namespaces and state directories hold, as sorted lines that compare
//! and diff well: links, addresses, routes, rules and the nftables ruleset as `ip -j` and
//! `nft -j` (outside oracles) show them, chosen sysctls, and every path under the state
//! directories. What the kernel changes by itself (interface indexes, MACs, operational
//! state, link-local addresses, rule handles) is left out, so that a namespace after
//! ADD+DEL compares equal to itself before.

use cni_testkit::ns::TestNetns;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One namespace's state, as lines.
pub fn netns_lines(ns: &TestNetns, sysctls: &[&str]) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    for link in as_array(ns.ip_json(&["-d", "link", "show"])) {
        let kind = link["linkinfo"]["info_kind"].as_str().unwrap_or("-");
        let master = link["master"].as_str().unwrap_or("-");
        lines.insert(format!("link {} kind={kind} master={master}", text(&link["ifname"])));
        // The lab's own stand-ins for NICs (ksm*): host-device must give them back with
        // their MTU and up/down state, not only their name.
        if text(&link["ifname"]).starts_with("ksm") {
            let up = as_array(link["flags"].clone()).iter().any(|f| f == "UP");
            lines.insert(format!("device {} mtu={} up={up}", text(&link["ifname"]), link["mtu"]));
        }
    }
    for link in as_array(ns.ip_json(&["addr", "show"])) {
        for addr in as_array(link["addr_info"].clone()) {
            let local = text(&addr["local"]);
            if !local.starts_with("fe80:") {
                lines.insert(format!("addr {} {local}/{}", text(&link["ifname"]), addr["prefixlen"]));
            }
        }
    }
    for family in ["-4", "-6"] {
        for route in as_array(ns.ip_json(&[family, "route", "show", "table", "all"])) {
            let dst = text(&route["dst"]);
            if dst.starts_with("fe80:") || dst.starts_with("ff00:") || route["type"] == "multicast" {
                continue;
            }
            lines.insert(format!(
                "route {family} table={} {dst} dev={} via={} type={}",
                text(&route["table"]),
                text(&route["dev"]),
                text(&route["gateway"]),
                text(&route["type"])
            ));
        }
        for rule in as_array(ns.ip_json(&[family, "rule", "show"])) {
            lines.insert(format!("rule {family} {rule}"));
        }
    }
    for item in nft_items(ns) {
        lines.insert(format!("nft {item}"));
    }
    for key in sysctls {
        let value = cni_net::sysctl::read_in(ns.netns(), key).unwrap_or_else(|e| format!("<{e}>"));
        lines.insert(format!("sysctl {key}={}", value.trim()));
    }
    lines
}

/// The ruleset's objects (tables, chains, rules, sets with their elements), handles removed.
fn nft_items(ns: &TestNetns) -> Vec<String> {
    let mut lines = Vec::new();
    for mut item in ns.nft_json() {
        strip_handles(&mut item);
        // A set's elements one line each: attachments add and remove single elements.
        for kind in ["set", "map"] {
            if let Some(set) = item.get_mut(kind) {
                let elements = set.as_object_mut().and_then(|s| s.remove("elem")).unwrap_or_default();
                for element in as_array(elements) {
                    lines.push(format!(
                        "{kind}-element {} {} {} {element}",
                        set["family"], set["table"], set["name"]
                    ));
                }
            }
        }
        lines.push(item.to_string());
    }
    lines
}

fn strip_handles(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("handle");
            map.values_mut().for_each(strip_handles);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_handles),
        _ => {}
    }
}

/// Every path under `root` (relative, `/` after directories).
pub fn file_lines(root: &Path) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    let mut stack = vec![PathBuf::from(root)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                lines.insert(format!("file {rel}/"));
                stack.push(path);
            } else {
                lines.insert(format!("file {rel}"));
            }
        }
    }
    lines
}

fn as_array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// How long state may take to settle: plugins hand the deletion of links to detached
/// helpers, so a link goes shortly after DEL returns. A limit for "never", not a speed.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Waits until `now()` equals `baseline`; panics after [`SETTLE`] with what differs.
pub fn assert_settles_to(what: &str, baseline: &BTreeSet<String>, mut now: impl FnMut() -> BTreeSet<String>) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let current = now();
        if &current == baseline {
            return;
        }
        if Instant::now() >= deadline {
            let left: Vec<&String> = current.difference(baseline).collect();
            let gone: Vec<&String> = baseline.difference(&current).collect();
            panic!("{what}: state differs from the baseline after {SETTLE:?}\n  left behind: {left:#?}\n  missing: {gone:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
