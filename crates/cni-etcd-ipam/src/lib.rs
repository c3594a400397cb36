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

use cni_sdk::catalog::Entry;
use cni_sdk::keys::config_keys;

/// The plugin's name: its `type` in a configuration and its binary's.
pub const NAME: &str = "etcd-ipam";

/// etcd-ipam's record for the catalog `cnitool validate`, the fuzzer and the docs drift
/// test read: its dry stage is the parsing and validation before any etcd work.
pub fn catalog() -> &'static [Entry] {
    &[Entry {
        name: NAME,
        make: || Box::new(plugin::EtcdIpam),
        config_stage: |req| plugin::parse(req).map(drop),
        keys: config_keys::<config::RawConf>,
        chained: false,
    }]
}
