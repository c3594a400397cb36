//! etcd-ipam: addresses unique across a cluster, kept in etcd.
//!
//! The pools are cut into blocks (a /26 by default). A node claims a block (it gets the
//! block's affinity) and hands out its addresses; it claims another when its blocks are
//! full, and borrows a free address from another node's block once every block is
//! claimed. Each attachment has a handle key naming its address, so DEL is one read and
//! one transaction. Every change is a compare-and-swap transaction on the block's key:
//! nodes never wait on a global lock, and two racing ADDs never get the same address.
//!
//! - [`config`]: the configuration;
//! - [`block`]: a block and its allocations;
//! - [`keys`]: the layout of the keys in etcd;
//! - [`allocator`]: the transactions;
//! - [`plugin`]: the [`cni_sdk::Plugin`] ([`plugin::EtcdIpam`]);
//! - [`agent`]: the node agent (`etcd-ipam agent`) and the plugin's side of its socket;
//! - [`batch`]: the agent's batching of concurrent ADDs into transactions;
//! - [`metrics`]: the node agent's metrics.
//!
//! A crate and a binary (`etcd-ipam`) of their own, not a plugin of the multi-call
//! `cni-plugins`: the etcd client and its TLS stack would otherwise weigh on every plugin
//! exec of every node. The agent is the binary's `agent` sub-command, as the dhcp daemon
//! is `dhcp daemon`: one binary per model, whose plugin and daemon always agree on the
//! protocol between them.
#![forbid(unsafe_code)]

pub mod agent;
pub mod allocator;
pub mod batch;
pub mod block;
pub mod config;
pub mod error;
pub mod keys;
pub mod liveness;
pub mod metrics;
pub mod plugin;

use cni_sdk::keys::{config_keys, Keys};
use cni_sdk::{CniError, Request};

/// The plugin's name: its `type` in a configuration and its binary's.
pub const NAME: &str = "etcd-ipam";

/// The keys etcd-ipam's configuration accepts beyond the common ones (what `cnitool
/// validate` and the docs drift test check against); `None` when `name` is not etcd-ipam.
pub fn plugin_keys(name: &str) -> Option<Keys> {
    (name == NAME).then(config_keys::<config::RawConf>)
}

/// etcd-ipam's parsing and validation of a request, before any etcd work (for `cnitool
/// validate` and the fuzzer); `None` when `name` is not etcd-ipam.
pub fn config_stage(name: &str, req: &Request) -> Option<Result<(), CniError>> {
    (name == NAME).then(|| plugin::parse(req).map(drop))
}
