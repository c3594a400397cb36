//! A small etcd v3 client for the cluster-wide parts of cni-rs (the `etcd-ipam` plugin and
//! the overlay agent), over etcd's native gRPC API.
//!
//! gRPC through tonic's generic client with the few etcd messages used written out by hand
//! ([`proto`]): nothing is generated at build time (no build script, no `protoc`). The
//! client is synchronous for its users; a current-thread tokio runtime of its own runs each
//! call. Every call used here is unary except watch (a stream of answers) and the lease
//! keep-alive (a stream, of which one request and one answer renew once).
//!
//! A member's answer is not trusted with memory or time: a message is at most
//! [`MAX_BODY`], a header list at most [`MAX_HEAD`], and each attempt of a call runs under
//! one deadline from the connection to the answer's last byte; anything over is an error,
//! so a hostile member cannot make a plugin abort or hang.

mod client;
mod error;
mod kv;
pub mod proto;
mod tls;
mod transport;
mod watch;
mod write_batch;

pub use client::{Client, MemberStatus, Observer, CALL_TIMEOUTS, FIRST_PATIENCE};
pub use error::{Error, Result};
pub use kv::{prefix_end, Compare, KeyValue, Op, Txn, TxnResponse};
pub use tls::{Tls, TlsFiles};
pub use transport::{Liveness, MAX_BODY, MAX_HEAD, WATCH_LIVENESS};
pub use watch::{Event, Watch};
