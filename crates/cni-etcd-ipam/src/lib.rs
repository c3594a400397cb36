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
//! - [`plugin`]: the [`cni_sdk::Plugin`] ([`plugin::EtcdIpam`]).

pub mod agent;
pub mod allocator;
pub mod batch;
pub mod block;
pub mod config;
pub mod error;
pub mod keys;
pub mod liveness;
pub mod plugin;
