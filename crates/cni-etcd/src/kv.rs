//! The v3 API's key-value types, as the JSON gateway spells them: bytes are base64, 64-bit
//! integers are strings, and fields holding their default value are left out.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

pub fn encode(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

fn decode(text: &str) -> Option<Vec<u8>> {
    B64.decode(text).ok()
}

/// An int64 field: a string in the gateway's JSON, absent when zero.
pub(crate) fn int_field(object: &Value, name: &str) -> i64 {
    match &object[name] {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The end of the key range holding every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // A prefix of all 0xff bytes: to the end of the key space.
    vec![0]
}

/// One key and its value with the revisions CAS compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

impl KeyValue {
    pub(crate) fn from_json(object: &Value) -> Option<KeyValue> {
        Some(KeyValue {
            key: decode(object["key"].as_str()?)?,
            value: object["value"].as_str().map(decode).unwrap_or(Some(Vec::new()))?,
            create_revision: int_field(object, "create_revision"),
            mod_revision: int_field(object, "mod_revision"),
            lease: int_field(object, "lease"),
        })
    }

    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

/// The key-values of a range answer.
pub(crate) fn kvs(answer: &Value) -> Vec<KeyValue> {
    answer["kvs"].as_array().map(|a| a.iter().filter_map(KeyValue::from_json).collect()).unwrap_or_default()
}

/// A condition of a transaction.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key's last modification is at this revision (0: the key does not exist).
    ModRevision(Vec<u8>, i64),
    /// The key was created at this revision (0: the key does not exist).
    CreateRevision(Vec<u8>, i64),
}

impl Compare {
    fn to_json(&self) -> Value {
        match self {
            Compare::ModRevision(key, rev) => json!({
                "key": encode(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev.to_string()
            }),
            Compare::CreateRevision(key, rev) => json!({
                "key": encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": rev.to_string()
            }),
        }
    }
}

/// An operation of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    Delete {
        key: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
    /// [`Op::Get`] served from the member's own copy: a transaction of nothing but these
    /// is a serializable read (no round of consensus), like
    /// [`crate::Client::get_serializable`].
    GetSerializable {
        key: Vec<u8>,
    },
    /// Every key under a prefix (without values when `keys_only`).
    GetPrefix {
        prefix: Vec<u8>,
        keys_only: bool,
    },
}

impl Op {
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Op {
        Op::Put { key: key.into(), value: value.into(), lease: 0 }
    }

    pub fn delete(key: impl Into<Vec<u8>>) -> Op {
        Op::Delete { key: key.into() }
    }

    pub fn get(key: impl Into<Vec<u8>>) -> Op {
        Op::Get { key: key.into() }
    }

    pub fn get_serializable(key: impl Into<Vec<u8>>) -> Op {
        Op::GetSerializable { key: key.into() }
    }

    pub fn get_prefix(prefix: impl Into<Vec<u8>>, keys_only: bool) -> Op {
        Op::GetPrefix { prefix: prefix.into(), keys_only }
    }

    fn to_json(&self) -> Value {
        match self {
            Op::GetPrefix { prefix, keys_only } => json!({"request_range": {
                "key": encode(prefix), "range_end": encode(&prefix_end(prefix)), "keys_only": keys_only
            }}),
            Op::Put { key, value, lease } => {
                let mut put = json!({"key": encode(key), "value": encode(value)});
                if *lease != 0 {
                    put["lease"] = lease.to_string().into();
                }
                json!({ "request_put": put })
            }
            Op::Delete { key } => json!({"request_delete_range": {"key": encode(key)}}),
            Op::Get { key } => json!({"request_range": {"key": encode(key)}}),
            Op::GetSerializable { key } => {
                json!({"request_range": {"key": encode(key), "serializable": true}})
            }
        }
    }
}

/// A transaction: `success` runs if every compare holds, `failure` otherwise.
#[derive(Debug, Clone, Default)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

impl Txn {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "compare": self.compare.iter().map(Compare::to_json).collect::<Vec<_>>(),
            "success": self.success.iter().map(Op::to_json).collect::<Vec<_>>(),
            "failure": self.failure.iter().map(Op::to_json).collect::<Vec<_>>(),
        })
    }
}

/// What a transaction did.
#[derive(Debug, Clone)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub revision: i64,
    responses: Vec<Value>,
}

impl TxnResponse {
    pub(crate) fn from_json(answer: &Value) -> TxnResponse {
        TxnResponse {
            succeeded: answer["succeeded"].as_bool().unwrap_or(false),
            revision: int_field(&answer["header"], "revision"),
            responses: answer["responses"].as_array().cloned().unwrap_or_default(),
        }
    }

    /// The key-values read by the `index`th operation (a [`Op::Get`]) of the branch that ran.
    pub fn range(&self, index: usize) -> Vec<KeyValue> {
        self.responses.get(index).map(|r| kvs(&r["response_range"])).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn key_value_from_gateway_json() {
        let kv = KeyValue::from_json(&json!({
            "key": "Zm9v", "create_revision": "2", "mod_revision": "7", "version": "3", "value": "YmFy"
        }))
        .unwrap();
        assert_eq!((kv.key.as_slice(), kv.value.as_slice()), (&b"foo"[..], &b"bar"[..]));
        assert_eq!((kv.create_revision, kv.mod_revision, kv.lease), (2, 7, 0));
        // An empty value is left out by the gateway.
        assert_eq!(KeyValue::from_json(&json!({"key": "Zm9v"})).unwrap().value, b"");
    }

    #[test]
    fn txn_json_spells_revisions_as_strings() {
        let txn = Txn {
            compare: vec![Compare::ModRevision(b"k".to_vec(), 5)],
            success: vec![Op::put("k", "v")],
            failure: vec![Op::get("k")],
        };
        let j = txn.to_json();
        assert_eq!(j["compare"][0]["mod_revision"], "5");
        assert_eq!(j["success"][0]["request_put"]["value"], "dg==");
        assert_eq!(j["failure"][0]["request_range"]["key"], "aw==");
    }
}
