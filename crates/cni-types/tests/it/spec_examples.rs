//! Every JSON example in the 1.0.0 specification parses into our types and prints back to
//! the same JSON.

use cni_types::{CniError, CniResult, NetConf, NetConfList, Version, VersionInfo};
use serde_json::Value;

const SPEC: &str = include_str!("../data/cni-spec-1.0.0.md");

/// The text of every ```json / ```jsonc block, with `//` comments and `...` elisions
/// (which the spec uses in a few examples) removed.
fn examples() -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = SPEC;
    while let Some(start) = rest.find("```json") {
        let body = &rest[start + "```json".len()..];
        let body = body.strip_prefix('c').unwrap_or(body);
        let end = body.find("```").expect("unterminated code block");
        out.push(clean(&body[..end]));
        rest = &body[end + 3..];
    }
    out
}

fn clean(block: &str) -> String {
    let mut text = String::new();
    let mut chars = block.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if c == '"' {
            in_string = !in_string;
        }
        if !in_string && c == '/' && chars.peek() == Some(&'/') {
            // The spec's flattened comments run up to the next key.
            while chars.peek().is_some_and(|&n| n != '"' && n != '\n') {
                chars.next();
            }
            continue;
        }
        text.push(c);
    }
    let text = text.replace("...", "");
    // An elision may leave a dangling comma before a closing brace.
    let re_trailing = |s: &str| s.replace(", }", " }").replace(",}", "}");
    re_trailing(&text)
}

fn without(mut v: Value, key: &str) -> Value {
    v.as_object_mut().unwrap().remove(key);
    v
}

fn round_trip_result(v: &Value) {
    let (result, version) = CniResult::parse(v.clone(), Version::V1_0_0).unwrap();
    let printed = result.to_value(version).unwrap();
    let printed = if v.get("cniVersion").is_none() { without(printed, "cniVersion") } else { printed };
    assert_eq!(&printed, v);
}

#[test]
fn every_spec_example_parses_and_round_trips() {
    let examples = examples();
    assert!(examples.len() >= 15, "found only {} examples", examples.len());
    let mut kinds = std::collections::BTreeMap::new();
    for text in examples.iter().filter(|t| !t.trim().is_empty()) {
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let kind = if value.get("plugins").is_some() {
            let list: NetConfList = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&list).unwrap(), value);
            for plugin in &list.plugins {
                let conf: NetConf = serde_json::from_value(Value::Object(plugin.clone())).unwrap();
                assert_eq!(serde_json::to_value(&conf).unwrap(), Value::Object(plugin.clone()));
            }
            "list"
        } else if value.get("supportedVersions").is_some() {
            let info: VersionInfo = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&info).unwrap(), value);
            "version"
        } else if value.get("code").is_some() {
            let err: CniError = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&err).unwrap(), value);
            "error"
        } else if value.get("type").is_some() {
            let conf: NetConf = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&conf).unwrap(), value);
            if let Some(prev) = &conf.prev_result {
                round_trip_result(prev);
            }
            "plugin config"
        } else if value.get("ips").is_some() {
            round_trip_result(&value);
            "result"
        } else {
            panic!("unclassified example: {text}");
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    for kind in ["list", "version", "error", "plugin config", "result"] {
        assert!(kinds.contains_key(kind), "no {kind} example found: {kinds:?}");
    }
}
