//! A small etcd v3 client for the cluster-wide parts of cni-rs (the `etcd-ipam` plugin and
//! the overlay agent).
//!
//! Why the JSON gateway and not gRPC: etcd serves its v3 API twice, as gRPC and as JSON
//! over HTTP/1.1 through `ureq` (the gateway, on the same client port: `POST /v3/kv/range` and so on).
//! gRPC would need protobuf code generation (protoc at build time) and an HTTP/2 stack
//! (tonic, hyper, tokio), a large part of a short-lived plugin's start-up and size. The
//! gateway needs a TCP socket and JSON, which the plugins already parse. The price is
//! bigger messages (base64 keys, decimal strings for revisions), negligible for IPAM's
//! small records. Every call used here is a unary POST except watch, whose answer is a
//! chunked stream of newline-delimited JSON messages.
//!
//! A member's answer is not trusted with memory or time: the response head, bodies and
//! stream messages are bounded ([`MAX_HEAD`], [`MAX_HEADERS`], [`MAX_BODY`]) and
//! a unary answer must arrive within [`ANSWER_TIMEOUTS`] read timeouts; anything over is
//! an error, so a hostile member cannot make a plugin abort or hang.

mod client;
mod coalesce;
mod error;
mod http;
mod kv;
mod tls;
mod watch;

pub use client::{Client, Observer};
pub use error::{Error, Result};
pub use http::{ANSWER_TIMEOUTS, MAX_BODY, MAX_HEAD, MAX_HEADERS};
pub use kv::{prefix_end, Compare, KeyValue, Op, Txn, TxnResponse};
pub use tls::{Tls, TlsFiles};
pub use watch::{Event, Watch};
