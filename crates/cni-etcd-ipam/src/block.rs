//! A block: a fixed-size piece of a pool (a /26 by default) that one node claims and
//! hands addresses out of. The whole block is one etcd key, so one compare of its
//! `mod_revision` guards every change to its allocations (two ADDs racing on a block:
//! one wins, the other re-reads and retries). Which attachment holds an address is
//! recorded both here (so the block alone says what is free) and under the attachment's
//! handle key (so DEL finds it in one read).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// An address's position in a block (0 is the block's network address).
pub type Offset = u32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub cidr: IpNet,
    /// The node that claimed the block and allocates from it first.
    pub affinity: String,
    /// Offset → handle (`container-id/ifname`).
    pub allocations: BTreeMap<Offset, String>,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl Block {
    pub fn new(cidr: IpNet, affinity: &str) -> Block {
        Block { cidr, affinity: affinity.to_string(), allocations: BTreeMap::new() }
    }

    /// The key-safe name of a block: `10.1.0.64-26`.
    pub fn id(cidr: &IpNet) -> String {
        format!("{}-{}", cidr.network(), cidr.prefix_len())
    }

    /// The CIDR a block id names.
    pub fn cidr_of_id(id: &str) -> Option<IpNet> {
        let (network, len) = id.rsplit_once('-')?;
        format!("{network}/{len}").parse().ok()
    }

    pub fn size(&self) -> u32 {
        1u32 << (self.cidr.max_prefix_len() - self.cidr.prefix_len())
    }

    /// The block's gateway: its first host address, never handed out.
    pub fn gateway(&self) -> IpAddr {
        self.address(1)
    }

    /// The network address, the gateway and (IPv4) the broadcast address are never handed out.
    fn reserved(&self, offset: Offset) -> bool {
        offset <= 1 || (matches!(self.cidr, IpNet::V4(_)) && offset == self.size() - 1)
    }

    pub fn address(&self, offset: Offset) -> IpAddr {
        let base = to_u128(self.cidr.network());
        match self.cidr {
            IpNet::V4(_) => IpAddr::V4(((base + offset as u128) as u32).into()),
            IpNet::V6(_) => IpAddr::V6((base + offset as u128).into()),
        }
    }

    pub fn offset_of(&self, ip: IpAddr) -> Option<Offset> {
        self.cidr.contains(&ip).then(|| (to_u128(ip) - to_u128(self.cidr.network())) as Offset)
    }

    /// The lowest free offset.
    pub fn first_free(&self) -> Option<Offset> {
        self.free_offsets().next()
    }

    /// The free offsets, lowest first.
    pub fn free_offsets(&self) -> impl Iterator<Item = Offset> + '_ {
        (0..self.size()).filter(|o| !self.reserved(*o) && !self.allocations.contains_key(o))
    }

    pub fn free_count(&self) -> u32 {
        let usable = (0..self.size()).filter(|o| !self.reserved(*o)).count() as u32;
        usable - self.allocations.len() as u32
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a block serializes")
    }

    pub fn from_json(bytes: &[u8]) -> Option<Block> {
        serde_json::from_slice(bytes).ok()
    }
}

/// Every block of `pool` of prefix length `block_len`, starting at a place that depends
/// on `node` (so nodes claiming their first blocks at once mostly try different ones) and
/// wrapping around.
pub fn candidates(pool: &IpNet, block_len: u8, node: &str) -> impl Iterator<Item = IpNet> {
    let count = 1u64 << (block_len - pool.prefix_len()).min(63);
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let hash = node.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
    let start = hash % count;
    let pool = *pool;
    (0..count).map(move |i| {
        let index = ((start + i) % count) as u128;
        let step = 1u128 << (pool.max_prefix_len() - block_len);
        let base = to_u128(pool.network()) + index * step;
        let ip = match pool {
            IpNet::V4(_) => IpAddr::V4((base as u32).into()),
            IpNet::V6(_) => IpAddr::V6(base.into()),
        };
        IpNet::new(ip, block_len).expect("a valid prefix length")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_and_free_addresses() {
        let mut block = Block::new("10.1.0.64/26".parse().unwrap(), "n1");
        assert_eq!(block.gateway().to_string(), "10.1.0.65");
        assert_eq!(block.first_free(), Some(2));
        assert_eq!(block.free_count(), 61);
        for o in 2..63 {
            block.allocations.insert(o, format!("c{o}/eth0"));
        }
        assert_eq!((block.first_free(), block.free_count()), (None, 0));
        block.allocations.remove(&7);
        assert_eq!(block.address(block.first_free().unwrap()).to_string(), "10.1.0.71");
        assert_eq!(block.offset_of("10.1.0.71".parse().unwrap()), Some(7));
        assert_eq!(block.offset_of("10.1.0.1".parse().unwrap()), None);
        assert_eq!(Block::from_json(&block.to_json()), Some(block));
    }

    #[test]
    fn ipv6_blocks_keep_the_last_address() {
        let block = Block::new("fd00::/126".parse().unwrap(), "n1");
        assert_eq!(block.free_count(), 2);
        assert_eq!(block.address(3).to_string(), "fd00::3");
    }

    #[test]
    fn candidates_cover_the_pool_once() {
        let pool: IpNet = "10.2.0.0/24".parse().unwrap();
        let mut all: Vec<String> = candidates(&pool, 26, "node-x").map(|b| b.to_string()).collect();
        all.sort();
        assert_eq!(all, ["10.2.0.0/26", "10.2.0.128/26", "10.2.0.192/26", "10.2.0.64/26"]);
        assert_eq!(Block::id(&"10.2.0.64/26".parse().unwrap()), "10.2.0.64-26");
    }
}
