//! `etcd-ipam-bench`'s integration tests, in the workspace's one-binary layout: the
//! benchmark run end to end.
#![forbid(unsafe_code)]

mod bench;
