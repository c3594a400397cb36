//! Changing a JSON document by JSON pointer, as the bad-input corpus describes its cases
//! (`crates/cni-plugins/tests/bad_input/`): set a value, making missing parent objects, or
//! remove a key.

use serde_json::{Map, Value};

/// Sets `value` at JSON pointer `pointer`, making missing parent objects; one past the
/// end of a list appends, as in JSON Patch.
pub fn set(root: &mut Value, pointer: &str, value: Value) {
    let mut parts: Vec<String> =
        pointer.split('/').skip(1).map(|p| p.replace("~1", "/").replace("~0", "~")).collect();
    let last = parts.pop().expect("a pointer names a key");
    let mut node = root;
    for part in parts {
        node = match node {
            Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
            _ => node
                .as_object_mut()
                .unwrap_or_else(|| panic!("{pointer}: not an object"))
                .entry(part)
                .or_insert_with(|| Value::Object(Map::new())),
        };
    }
    match node {
        Value::Array(items) => match last.parse::<usize>().unwrap() {
            i if i == items.len() => items.push(value),
            i => items[i] = value,
        },
        _ => {
            node.as_object_mut().unwrap_or_else(|| panic!("{pointer}: not an object")).insert(last, value);
        }
    }
}

/// Removes the key at JSON pointer `pointer`, which must exist.
pub fn remove(root: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = root.pointer_mut(parent).unwrap_or_else(|| panic!("{pointer}: no parent"));
    assert!(parent.as_object_mut().unwrap().remove(key).is_some(), "{pointer}: nothing to remove");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_makes_parents_and_appends_and_remove_removes() {
        let mut doc = json!({"ipam": {"ranges": [[{"subnet": "a"}]]}});
        set(&mut doc, "/ipam/ranges/1", json!([]));
        set(&mut doc, "/ipam/ranges/0/0/subnet", json!("b"));
        set(&mut doc, "/a~1b/c", json!(1));
        remove(&mut doc, "/ipam/ranges/0/0/subnet");
        assert_eq!(doc, json!({"ipam": {"ranges": [[{}], []]}, "a/b": {"c": 1}}));
    }
}
