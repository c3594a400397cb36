//! The v3 API's key-value types as this crate's users see them, and their etcd messages
//! ([`crate::proto`]).

use crate::proto;

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

impl From<proto::KeyValue> for KeyValue {
    fn from(kv: proto::KeyValue) -> KeyValue {
        KeyValue {
            key: kv.key,
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        }
    }
}

impl KeyValue {
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

/// The key-values of a range answer.
pub(crate) fn kvs(answer: proto::RangeResponse) -> Vec<KeyValue> {
    answer.kvs.into_iter().map(KeyValue::from).collect()
}

/// The revision an answer's header reports (0 when it has none).
pub(crate) fn revision(header: Option<&proto::ResponseHeader>) -> i64 {
    header.map_or(0, |header| header.revision)
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
    fn to_proto(&self) -> proto::Compare {
        let (key, target, revision) = match self {
            Compare::ModRevision(key, rev) => {
                (key, proto::TARGET_MOD, proto::CompareTarget::ModRevision(*rev))
            }
            Compare::CreateRevision(key, rev) => {
                (key, proto::TARGET_CREATE, proto::CompareTarget::CreateRevision(*rev))
            }
        };
        proto::Compare {
            result: proto::COMPARE_EQUAL,
            target,
            key: key.clone(),
            target_union: Some(revision),
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

    fn to_proto(&self) -> proto::RequestOp {
        let get = |key: &[u8], serializable| proto::RangeRequest {
            key: key.to_vec(),
            serializable,
            ..Default::default()
        };
        let request = match self {
            Op::GetPrefix { prefix, keys_only } => proto::Request::Range(proto::RangeRequest {
                key: prefix.clone(),
                range_end: prefix_end(prefix),
                keys_only: *keys_only,
                ..Default::default()
            }),
            Op::Put { key, value, lease } => proto::Request::Put(proto::PutRequest {
                key: key.clone(),
                value: value.clone(),
                lease: *lease,
            }),
            Op::Delete { key } => proto::Request::DeleteRange(proto::DeleteRangeRequest {
                key: key.clone(),
                ..Default::default()
            }),
            Op::Get { key } => proto::Request::Range(get(key, false)),
            Op::GetSerializable { key } => proto::Request::Range(get(key, true)),
        };
        proto::RequestOp { request: Some(request) }
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
    pub(crate) fn to_proto(&self) -> proto::TxnRequest {
        proto::TxnRequest {
            compare: self.compare.iter().map(Compare::to_proto).collect(),
            success: self.success.iter().map(Op::to_proto).collect(),
            failure: self.failure.iter().map(Op::to_proto).collect(),
        }
    }
}

/// What a transaction did.
#[derive(Debug, Clone)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub revision: i64,
    responses: Vec<proto::ResponseOp>,
}

impl From<proto::TxnResponse> for TxnResponse {
    fn from(answer: proto::TxnResponse) -> TxnResponse {
        TxnResponse {
            succeeded: answer.succeeded,
            revision: revision(answer.header.as_ref()),
            responses: answer.responses,
        }
    }
}

impl TxnResponse {
    /// The key-values read by the `index`th operation (a [`Op::Get`]) of the branch that ran.
    pub fn range(&self, index: usize) -> Vec<KeyValue> {
        match self.responses.get(index).and_then(|op| op.response.as_ref()) {
            Some(proto::Response::Range(range)) => range.kvs.iter().cloned().map(KeyValue::from).collect(),
            _ => Vec::new(),
        }
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
    fn txn_ops_become_etcds_requests() {
        let txn = Txn {
            compare: vec![Compare::CreateRevision(b"k".to_vec(), 0)],
            success: vec![Op::Put { key: b"k".to_vec(), value: b"v".to_vec(), lease: 7 }],
            failure: vec![Op::get_prefix("/p/", true), Op::get_serializable("k")],
        };
        let request = txn.to_proto();
        assert_eq!(request.compare[0].target, proto::TARGET_CREATE);
        assert_eq!(request.compare[0].target_union, Some(proto::CompareTarget::CreateRevision(0)));
        let Some(proto::Request::Put(put)) = &request.success[0].request else { panic!("{request:?}") };
        assert_eq!(put.lease, 7);
        let Some(proto::Request::Range(prefix)) = &request.failure[0].request else { panic!("{request:?}") };
        assert_eq!((prefix.range_end.as_slice(), prefix.keys_only), (&b"/p0"[..], true));
        let Some(proto::Request::Range(get)) = &request.failure[1].request else { panic!("{request:?}") };
        assert!(get.serializable && get.range_end.is_empty());
    }
}
