//! Where etcd-ipam keeps its state, under `<prefix>/<network>/`:
//!
//! - `block/<block-id>`: a [`Block`](super::block::Block) (its affinity and allocations);
//! - `affinity/<node>/<block-id>`: an empty key per block a node claimed, so a node lists
//!   its own blocks with one prefix read;
//! - `handle/<container-id>/<ifname>`: a [`Handle`] — the address an attachment holds and
//!   its block, so DEL is one read and one transaction whatever the pool's size;
//! - `seen/<node>` (on a lease) and `registered/<node>`: node heartbeats, for reclaiming
//!   the blocks of nodes that are gone (only with `nodeGracePeriodSeconds`);
//! - `<prefix>/pools/<network>`: the network's pools, so that two networks never share
//!   addresses (a new block is only claimed after checking the other networks' pools).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::config::EtcdIpamConf;

/// What an attachment holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    pub ip: IpAddr,
    pub block: String,
    pub node: String,
}

/// The keys of one network.
pub struct Keys {
    root: String,
    prefix: String,
    network: String,
}

impl Keys {
    pub fn new(conf: &EtcdIpamConf) -> Keys {
        Keys {
            root: format!("{}/{}/", conf.prefix, conf.network),
            prefix: conf.prefix.clone(),
            network: conf.network.clone(),
        }
    }

    pub fn block(&self, block_id: &str) -> Vec<u8> {
        format!("{}block/{block_id}", self.root).into_bytes()
    }

    pub fn blocks(&self) -> Vec<u8> {
        format!("{}block/", self.root).into_bytes()
    }

    pub fn affinity(&self, node: &str, block_id: &str) -> Vec<u8> {
        format!("{}affinity/{node}/{block_id}", self.root).into_bytes()
    }

    pub fn affinities(&self, node: &str) -> Vec<u8> {
        format!("{}affinity/{node}/", self.root).into_bytes()
    }

    /// The block id at the end of an affinity or block key.
    pub fn block_id_of(key: &[u8]) -> String {
        let key = String::from_utf8_lossy(key);
        key.rsplit('/').next().unwrap_or_default().to_string()
    }

    pub fn handle(&self, handle_id: &str) -> Vec<u8> {
        format!("{}handle/{handle_id}", self.root).into_bytes()
    }

    pub fn handles(&self) -> Vec<u8> {
        format!("{}handle/", self.root).into_bytes()
    }

    /// The handle id (`container-id/ifname`) at the end of a handle key.
    pub fn handle_id_of(&self, key: &[u8]) -> String {
        let key = String::from_utf8_lossy(key);
        key.strip_prefix(&format!("{}handle/", self.root)).unwrap_or_default().to_string()
    }

    /// A node's heartbeat, on a lease of the grace period (see [`super::liveness`]).
    pub fn seen(&self, node: &str) -> Vec<u8> {
        format!("{}seen/{node}", self.root).into_bytes()
    }

    /// Present (without a lease) for every node that has sent a heartbeat.
    pub fn registered(&self, node: &str) -> Vec<u8> {
        format!("{}registered/{node}", self.root).into_bytes()
    }

    pub fn registered_all(&self) -> Vec<u8> {
        format!("{}registered/", self.root).into_bytes()
    }

    pub fn pools(&self) -> Vec<u8> {
        format!("{}/pools/", self.prefix).into_bytes()
    }

    pub fn own_pools(&self) -> Vec<u8> {
        format!("{}/pools/{}", self.prefix, self.network).into_bytes()
    }
}

/// The handle id of an attachment.
pub fn handle_id(container_id: &str, ifname: &str) -> String {
    format!("{container_id}/{ifname}")
}
