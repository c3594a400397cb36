//! The etcd v3 messages this client sends and reads (packages `etcdserverpb` and `mvccpb`),
//! written out by hand with prost's derive instead of generated from etcd's `.proto` files:
//! no build script and no `protoc`. Only the fields used here are declared; a field an
//! answer carries that is not declared is skipped by the decoder, as protobuf intends. The
//! tags are etcd's (api/etcdserverpb/rpc.proto, api/mvccpb/kv.proto): a wrong one would
//! be another field to etcd, so the golden-bytes tests below pin the encodings.

/// The gRPC paths of the methods called.
pub mod method {
    pub const RANGE: &str = "/etcdserverpb.KV/Range";
    pub const PUT: &str = "/etcdserverpb.KV/Put";
    pub const DELETE_RANGE: &str = "/etcdserverpb.KV/DeleteRange";
    pub const TXN: &str = "/etcdserverpb.KV/Txn";
    pub const WATCH: &str = "/etcdserverpb.Watch/Watch";
    pub const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
    pub const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";
    pub const LEASE_KEEP_ALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
    pub const LEASE_TIME_TO_LIVE: &str = "/etcdserverpb.Lease/LeaseTimeToLive";
    pub const STATUS: &str = "/etcdserverpb.Maintenance/Status";
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// mvccpb.KeyValue.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(bool, tag = "7")]
    pub serializable: bool,
    #[prost(bool, tag = "8")]
    pub keys_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
    #[prost(bool, tag = "3")]
    pub more: bool,
    #[prost(int64, tag = "4")]
    pub count: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub deleted: i64,
}

/// Compare.CompareResult.
pub const COMPARE_EQUAL: i32 = 0;
/// Compare.CompareTarget.
pub const TARGET_CREATE: i32 = 1;
pub const TARGET_MOD: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    #[prost(int32, tag = "1")]
    pub result: i32,
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    #[prost(oneof = "CompareTarget", tags = "5, 6")]
    pub target_union: Option<CompareTarget>,
}

/// Compare's `target_union`: a member of a oneof is sent even when zero, which is how a
/// compare against revision 0 ("the key does not exist") reaches etcd.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum CompareTarget {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    #[prost(int64, tag = "6")]
    ModRevision(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(oneof = "Request", tags = "1, 2, 3")]
    pub request: Option<Request>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Request {
    #[prost(message, tag = "1")]
    Range(RangeRequest),
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeRequest),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseOp {
    #[prost(oneof = "Response", tags = "1, 2, 3")]
    pub response: Option<Response>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Response {
    #[prost(message, tag = "1")]
    Range(RangeResponse),
    #[prost(message, tag = "2")]
    Put(PutResponse),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeResponse),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub ttl: i64,
    #[prost(int64, tag = "2")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRevokeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseTimeToLiveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(bool, tag = "2")]
    pub keys: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseTimeToLiveResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(int64, tag = "4")]
    pub granted_ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(uint64, tag = "4")]
    pub leader: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    #[prost(oneof = "WatchRequestUnion", tags = "1, 2, 3")]
    pub request_union: Option<WatchRequestUnion>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum WatchRequestUnion {
    #[prost(message, tag = "1")]
    Create(WatchCreateRequest),
    #[prost(message, tag = "2")]
    Cancel(WatchCancelRequest),
    #[prost(message, tag = "3")]
    Progress(WatchProgressRequest),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
    #[prost(bool, tag = "4")]
    pub progress_notify: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCancelRequest {
    #[prost(int64, tag = "1")]
    pub watch_id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchProgressRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
}

/// mvccpb.Event.EventType.
pub const EVENT_DELETE: i32 = 1;

/// mvccpb.Event.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<KeyValue>,
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// A compare-guarded put with a read in its failure branch, byte by byte as etcd's own
    /// Go client encodes it.
    #[test]
    fn a_txn_request_encodes_with_etcds_tags() {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: COMPARE_EQUAL,
                target: TARGET_MOD,
                key: b"k".to_vec(),
                target_union: Some(CompareTarget::ModRevision(5)),
            }],
            success: vec![RequestOp {
                request: Some(Request::Put(PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    lease: 0,
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::Range(RangeRequest { key: b"k".to_vec(), ..Default::default() })),
            }],
        };
        #[rustfmt::skip]
        let expected = [
            0x0a, 0x07, // compare (1), 7 bytes
                0x10, 0x02, // target (2) = MOD
                0x1a, 0x01, b'k', // key (3)
                0x30, 0x05, // mod_revision (6) = 5
            0x12, 0x08, // success (2), 8 bytes
                0x12, 0x06, // request_put (2)
                    0x0a, 0x01, b'k', // key (1)
                    0x12, 0x01, b'v', // value (2)
            0x1a, 0x05, // failure (3), 5 bytes
                0x0a, 0x03, // request_range (1)
                    0x0a, 0x01, b'k', // key (1)
        ];
        assert_eq!(txn.encode_to_vec(), expected);
    }

    /// "Create if absent" compares the create revision with 0: the zero must be on the wire.
    #[test]
    fn a_compare_with_revision_zero_still_sends_the_revision() {
        let compare = Compare {
            result: COMPARE_EQUAL,
            target: TARGET_CREATE,
            key: b"k".to_vec(),
            target_union: Some(CompareTarget::CreateRevision(0)),
        };
        assert_eq!(compare.encode_to_vec(), [0x10, 0x01, 0x1a, 0x01, b'k', 0x28, 0x00]);
    }

    #[test]
    fn a_range_answer_and_a_watch_event_decode_with_etcds_tags() {
        #[rustfmt::skip]
        let range = [
            0x0a, 0x02, 0x18, 0x09, // header (1) { revision (3) = 9 }
            0x12, 0x0e, // kvs (2), 14 bytes
                0x0a, 0x01, b'k', // key (1)
                0x10, 0x02, // create_revision (2)
                0x18, 0x07, // mod_revision (3)
                0x20, 0x03, // version (4)
                0x2a, 0x01, b'v', // value (5)
                0x30, 0x04, // lease (6)
        ];
        let answer = RangeResponse::decode(&range[..]).unwrap();
        assert_eq!(answer.header.unwrap().revision, 9);
        let kv = &answer.kvs[0];
        assert_eq!((kv.key.as_slice(), kv.value.as_slice()), (&b"k"[..], &b"v"[..]));
        assert_eq!((kv.create_revision, kv.mod_revision, kv.version, kv.lease), (2, 7, 3, 4));
        // A watch answer: watch_id (2), then events (11) holding a DELETE of "k".
        let watch = [0x10, 0x01, 0x5a, 0x07, 0x08, 0x01, 0x12, 0x03, 0x0a, 0x01, b'k'];
        let answer = WatchResponse::decode(&watch[..]).unwrap();
        assert_eq!(answer.watch_id, 1);
        assert_eq!(answer.events[0].r#type, EVENT_DELETE);
        assert_eq!(answer.events[0].kv.as_ref().unwrap().key, b"k");
    }
}
