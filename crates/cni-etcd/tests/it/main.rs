//! The etcd client's integration tests in one binary: against a real 3-member etcd cluster
//! on 127.0.0.1, in plain text and over TLS, and against hostile fake members.

mod client;
mod hostile;
mod tls;
