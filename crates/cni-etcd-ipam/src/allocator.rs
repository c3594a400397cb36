//! Allocation against etcd, every change one compare-and-swap transaction:
//!
//! 1. one read: the attachment's handle (an ADD repeated returns what it got before) and
//!    the keys of the node's blocks;
//! 2. the first of the node's blocks with a free address: swap in the block with the new
//!    allocation and create the handle, if the block is unchanged since it was read and
//!    the handle still does not exist;
//! 3. none has room: claim a block nobody has (create-if-absent), allocating from it in the
//!    same transaction;
//! 4. no unclaimed block is left: borrow a free address from another node's block.
//!
//! The reads are serializable (served by the member without a round of consensus): the
//! transaction's compares catch anything they missed. An allocator that lives on (a node
//! agent, the benchmark's library mode) also remembers the block it last wrote and the
//! revision the write made, and then needs no read at all: one transaction per ADD.
//!
//! A lost race re-reads and starts again. Nothing is written outside these transactions,
//! so an ADD that fails (etcd unreachable, pool exhausted) leaves nothing half-allocated.

use std::net::IpAddr;

use cni_etcd::{Client, Compare, KeyValue, Op, Txn};
use ipnet::IpNet;

use super::block::{candidates, Block, Offset};
use super::config::EtcdIpamConf;
use super::error::EtcdIpamError;
use super::keys::{Handle, Keys};

/// How many lost races one operation tolerates before giving up with code 11.
const MAX_ATTEMPTS: usize = 64;

/// The most operations etcd takes in one branch (or the compares) of a transaction: its
/// `--max-txn-ops`, 128 unless the operator raised it. A larger transaction is refused
/// whole, which would send every ADD of the batch down the one-by-one path.
pub const ETCD_MAX_TXN_OPS: usize = 128;

/// The attachments one batch transaction takes: each adds a handle put and a compare, the
/// block adds one of each.
pub const MAX_BATCH: usize = ETCD_MAX_TXN_OPS - 1;

/// An address handed out: the address with its block's prefix length, and the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub address: IpNet,
    pub gateway: IpAddr,
}

enum Step {
    Done(Allocation),
    /// The block changed under us, or nothing here had room: go on / start again.
    Lost,
    NoRoom,
}

fn store_error(what: &str, key: &[u8]) -> EtcdIpamError {
    EtcdIpamError::Store(format!("{what} at {} is not valid", String::from_utf8_lossy(key)))
}

fn parse_handle(kv: &KeyValue) -> Result<Handle, EtcdIpamError> {
    serde_json::from_slice(&kv.value).map_err(|_| store_error("handle", &kv.key))
}

fn parse_block(kv: &KeyValue) -> Result<Block, EtcdIpamError> {
    Block::from_json(&kv.value).ok_or_else(|| store_error("block", &kv.key))
}

fn allocation_of(handle: &Handle) -> Result<Allocation, EtcdIpamError> {
    let (network, len) =
        handle.block.rsplit_once('-').ok_or_else(|| store_error("handle", handle.block.as_bytes()))?;
    let cidr: IpNet =
        format!("{network}/{len}").parse().map_err(|_| store_error("handle", handle.block.as_bytes()))?;
    let block = Block::new(cidr, "");
    Ok(Allocation {
        address: IpNet::new(handle.ip, cidr.prefix_len()).expect("valid"),
        gateway: block.gateway(),
    })
}

/// An allocator for one network on one node.
pub struct Allocator {
    pub conf: EtcdIpamConf,
    pub keys: Keys,
    pub client: Client,
    /// The node's block this allocator last wrote, at the revision of that write.
    cached: Option<(Block, i64)>,
}

impl Allocator {
    pub fn new(conf: EtcdIpamConf, client: Client) -> Allocator {
        Allocator { keys: Keys::new(&conf), conf, client, cached: None }
    }

    /// Swaps in `block` with `offset` given to `handle_id`, if the block is still at
    /// `revision` (0: does not exist yet, and is claimed by this transaction).
    fn commit(
        &mut self,
        mut block: Block,
        revision: i64,
        offset: Offset,
        handle_id: &str,
    ) -> Result<Step, EtcdIpamError> {
        let block_id = Block::id(&block.cidr);
        let block_key = self.keys.block(&block_id);
        let handle_key = self.keys.handle(handle_id);
        block.allocations.insert(offset, handle_id.to_string());
        let handle =
            Handle { ip: block.address(offset), block: block_id.clone(), node: self.conf.node.clone() };
        let mut success = vec![
            Op::put(block_key.clone(), block.to_json()),
            Op::put(handle_key.clone(), serde_json::to_vec(&handle).expect("serializes")),
        ];
        let block_guard = if revision == 0 {
            success.push(Op::put(self.keys.affinity(&self.conf.node, &block_id), Vec::new()));
            Compare::CreateRevision(block_key, 0)
        } else {
            Compare::ModRevision(block_key, revision)
        };
        let txn = Txn {
            compare: vec![block_guard, Compare::CreateRevision(handle_key.clone(), 0)],
            success,
            failure: vec![Op::get(handle_key)],
        };
        let answer = self.client.txn(&txn)?;
        if answer.succeeded {
            self.cached = (block.affinity == self.conf.node).then_some((block, answer.revision));
            return Ok(Step::Done(allocation_of(&handle)?));
        }
        self.cached = None;
        // The same ADD running twice at once: the other one's address is ours.
        match answer.range(0).first() {
            Some(kv) => Ok(Step::Done(allocation_of(&parse_handle(kv)?)?)),
            None => Ok(Step::Lost),
        }
    }

    /// Whether a block lies in the configured pools (a node keeps the affinity of blocks of
    /// pools since removed from its configuration, but allocates only from current ones).
    fn in_pools(&self, cidr: &IpNet) -> bool {
        self.conf.pools.iter().any(|pool| pool.contains(cidr))
    }

    /// Tries one existing block; `NoRoom` when it is full or outside the pools.
    fn try_block(&mut self, kv: &KeyValue, handle_id: &str) -> Result<Step, EtcdIpamError> {
        let block = parse_block(kv)?;
        if !self.in_pools(&block.cidr) {
            return Ok(Step::NoRoom);
        }
        match block.first_free() {
            Some(offset) => self.commit(block, kv.mod_revision, offset, handle_id),
            None => Ok(Step::NoRoom),
        }
    }

    /// The first of the node's blocks (in the configured pools) with room. They are read
    /// together, in transactions of up to [`ETCD_MAX_TXN_OPS`] serializable reads, not
    /// one request each: a node that has filled many blocks reads them all whenever its
    /// current one fills, and etcd's cost is mostly per request.
    fn in_own_blocks(&mut self, block_ids: &[String], handle_id: &str) -> Result<Step, EtcdIpamError> {
        let keys: Vec<Vec<u8>> = block_ids
            .iter()
            .filter(|id| Block::cidr_of_id(id).is_some_and(|cidr| self.in_pools(&cidr)))
            .map(|id| self.keys.block(id))
            .collect();
        for chunk in keys.chunks(ETCD_MAX_TXN_OPS) {
            let reads =
                Txn { success: chunk.iter().cloned().map(Op::get_serializable).collect(), ..Txn::default() };
            let answer = self.client.txn(&reads)?;
            for kv in (0..chunk.len()).filter_map(|i| answer.range(i).into_iter().next()) {
                match self.try_block(&kv, handle_id)? {
                    Step::NoRoom => continue,
                    other => return Ok(other),
                }
            }
        }
        Ok(Step::NoRoom)
    }

    /// Refuses a pool that overlaps another network's, and records this network's pools.
    fn check_pools(&mut self) -> Result<(), EtcdIpamError> {
        let (registered, _) = self.client.get_prefix(&self.keys.pools(), false)?;
        let own_key = self.keys.own_pools();
        let ours: Vec<String> = self.conf.pools.iter().map(ToString::to_string).collect();
        for kv in &registered {
            if kv.key == own_key {
                continue;
            }
            let theirs: Vec<IpNet> = serde_json::from_slice(&kv.value).unwrap_or_default();
            for pool in &self.conf.pools {
                if let Some(other) = theirs.iter().find(|o| o.contains(pool) || pool.contains(*o)) {
                    let network = Keys::block_id_of(&kv.key);
                    return Err(EtcdIpamError::InvalidConfig(format!(
                        "ipam.pools: {pool} overlaps pool {other} of network {network}"
                    )));
                }
            }
        }
        let value = serde_json::to_vec(&ours).expect("serializes");
        if registered.iter().all(|kv| kv.key != own_key || kv.value != value) {
            self.client.put(&own_key, &value, 0)?;
        }
        Ok(())
    }

    fn claim_block(&mut self, handle_id: &str) -> Result<Step, EtcdIpamError> {
        self.check_pools()?;
        let (existing, _) = self.client.get_prefix_serializable(&self.keys.blocks(), true)?;
        let taken: std::collections::HashSet<String> =
            existing.iter().map(|kv| Keys::block_id_of(&kv.key)).collect();
        for pool in self.conf.pools.clone() {
            let free = candidates(&pool, self.conf.block_len, &self.conf.node)
                .find(|b| !taken.contains(&Block::id(b)));
            if let Some(cidr) = free {
                let block = Block::new(cidr, &self.conf.node);
                let offset = block.first_free().expect("a new block has room");
                return self.commit(block, 0, offset, handle_id);
            }
        }
        Ok(Step::NoRoom)
    }

    fn borrow(&mut self, handle_id: &str) -> Result<Step, EtcdIpamError> {
        let (blocks, _) = self.client.get_prefix_serializable(&self.keys.blocks(), false)?;
        for kv in &blocks {
            match self.try_block(kv, handle_id)? {
                Step::NoRoom => continue,
                other => return Ok(other),
            }
        }
        Ok(Step::NoRoom)
    }

    /// ADD: the attachment's address (the same one when it already has one).
    pub fn allocate(&mut self, handle_id: &str) -> Result<Allocation, EtcdIpamError> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some((block, revision)) = self.cached.clone().filter(|(b, _)| self.in_pools(&b.cidr)) {
                if let Some(offset) = block.first_free() {
                    match self.commit(block, revision, offset, handle_id)? {
                        Step::Done(allocation) => return Ok(allocation),
                        _ => continue,
                    }
                }
            }
            let handle_key = self.keys.handle(handle_id);
            if self.client.get_serializable(&handle_key)?.is_some() {
                // A repeated ADD (rare): confirmed by a linearizable read, as a stale copy
                // may still show a handle that a DEL has since released.
                if let Some(kv) = self.client.get(&handle_key)? {
                    return allocation_of(&parse_handle(&kv)?);
                }
            }
            let (affine, _) =
                self.client.get_prefix_serializable(&self.keys.affinities(&self.conf.node), true)?;
            let own: Vec<String> = affine.iter().map(|kv| Keys::block_id_of(&kv.key)).collect();
            let mut step = self.in_own_blocks(&own, handle_id)?;
            if matches!(step, Step::NoRoom) {
                step = self.claim_block(handle_id)?;
            }
            if matches!(step, Step::NoRoom) {
                step = self.borrow(handle_id)?;
            }
            match step {
                Step::Done(allocation) => return Ok(allocation),
                Step::Lost => continue,
                Step::NoRoom => {
                    let pools: Vec<String> = self.conf.pools.iter().map(ToString::to_string).collect();
                    return Err(EtcdIpamError::Exhausted {
                        network: self.conf.network.clone(),
                        pools: pools.join(","),
                    });
                }
            }
        }
        Err(EtcdIpamError::Contended(MAX_ATTEMPTS))
    }

    /// ADD for several attachments at once (a node agent's concurrent requests): as many as
    /// the cached block has room for are claimed in one transaction (one block write, one
    /// handle created per attachment, all guarded by the block's revision and the handles'
    /// absence), at most [`MAX_BATCH`] per transaction; when the cached block is full (or
    /// there is none) one ADD goes alone, finding or claiming the next block, and batching
    /// resumes on it. After a lost batch transaction (a repeated ADD, the block changed) or
    /// a failed one, the rest go through [`Allocator::allocate`] one by one.
    pub fn allocate_batch(&mut self, handle_ids: &[String]) -> Vec<Result<Allocation, EtcdIpamError>> {
        let distinct = handle_ids.iter().collect::<std::collections::HashSet<_>>().len() == handle_ids.len();
        let mut done: Vec<Result<Allocation, EtcdIpamError>> = Vec::with_capacity(handle_ids.len());
        let mut batching = distinct;
        while done.len() < handle_ids.len() {
            let rest = &handle_ids[done.len()..];
            if batching && rest.len() > 1 {
                match self.commit_batch(&rest[..rest.len().min(MAX_BATCH)]) {
                    Ok(allocations) if !allocations.is_empty() => {
                        done.extend(allocations.into_iter().map(Ok));
                        continue;
                    }
                    Ok(_) => {}
                    // The one-by-one path re-reads (and reports its own errors).
                    Err(_) => {
                        self.cached = None;
                        batching = false;
                    }
                }
            }
            done.push(self.allocate(&rest[0]));
        }
        done
    }

    /// One transaction for the first attachments of `handle_ids` the cached block has room
    /// for; the allocations made (none when there is no cached block or the swap lost).
    fn commit_batch(&mut self, handle_ids: &[String]) -> Result<Vec<Allocation>, EtcdIpamError> {
        let Some((mut block, revision)) = self.cached.clone().filter(|(b, _)| self.in_pools(&b.cidr)) else {
            return Ok(Vec::new());
        };
        let offsets: Vec<Offset> = block.free_offsets().take(handle_ids.len()).collect();
        if offsets.is_empty() {
            return Ok(Vec::new());
        }
        let block_id = Block::id(&block.cidr);
        let block_key = self.keys.block(&block_id);
        let mut compare = vec![Compare::ModRevision(block_key.clone(), revision)];
        let mut success = Vec::new();
        let mut handles = Vec::new();
        for (offset, handle_id) in offsets.iter().zip(handle_ids) {
            block.allocations.insert(*offset, handle_id.clone());
            let handle =
                Handle { ip: block.address(*offset), block: block_id.clone(), node: self.conf.node.clone() };
            let handle_key = self.keys.handle(handle_id);
            compare.push(Compare::CreateRevision(handle_key.clone(), 0));
            success.push(Op::put(handle_key, serde_json::to_vec(&handle).expect("serializes")));
            handles.push(handle);
        }
        success.push(Op::put(block_key, block.to_json()));
        let answer = self.client.txn(&Txn { compare, success, failure: vec![] })?;
        if !answer.succeeded {
            return Err(EtcdIpamError::Contended(1));
        }
        self.cached = Some((block, answer.revision));
        handles.iter().map(allocation_of).collect()
    }

    /// The attachment's handle, if it has one.
    pub fn handle(&mut self, handle_id: &str) -> Result<Option<Handle>, EtcdIpamError> {
        self.client.get(&self.keys.handle(handle_id))?.map(|kv| parse_handle(&kv)).transpose()
    }

    /// DEL: releases the attachment's address; nothing to do when it has none. Returns the
    /// address released.
    pub fn release(&mut self, handle_id: &str) -> Result<Option<IpAddr>, EtcdIpamError> {
        let handle_key = self.keys.handle(handle_id);
        for _ in 0..MAX_ATTEMPTS {
            let Some(handle_kv) = self.client.get(&handle_key)? else { return Ok(None) };
            let handle = parse_handle(&handle_kv)?;
            let block_key = self.keys.block(&handle.block);
            let mut compare = vec![Compare::ModRevision(handle_key.clone(), handle_kv.mod_revision)];
            let mut success = vec![Op::delete(handle_key.clone())];
            if let Some(block_kv) = self.client.get(&block_key)? {
                let mut block = parse_block(&block_kv)?;
                let offset = block.offset_of(handle.ip);
                if offset.is_some_and(|o| block.allocations.get(&o).map(String::as_str) == Some(handle_id)) {
                    block.allocations.remove(&offset.expect("checked"));
                    compare.push(Compare::ModRevision(block_key.clone(), block_kv.mod_revision));
                    success.push(Op::put(block_key, block.to_json()));
                }
            }
            if self.client.txn(&Txn { compare, success, failure: vec![] })?.succeeded {
                return Ok(Some(handle.ip));
            }
        }
        Err(EtcdIpamError::Contended(MAX_ATTEMPTS))
    }

    /// Every handle of the network: (handle id, handle).
    pub fn all_handles(&mut self) -> Result<Vec<(String, Handle)>, EtcdIpamError> {
        let (kvs, _) = self.client.get_prefix(&self.keys.handles(), false)?;
        kvs.iter().map(|kv| Ok((self.keys.handle_id_of(&kv.key), parse_handle(kv)?))).collect()
    }

    /// Whether any address is left: an unclaimed block or a free address in a claimed one.
    pub fn has_room(&mut self) -> Result<bool, EtcdIpamError> {
        let (blocks, _) = self.client.get_prefix(&self.keys.blocks(), false)?;
        let mut claimed = std::collections::HashSet::new();
        for kv in &blocks {
            let block = parse_block(kv)?;
            if !self.in_pools(&block.cidr) {
                continue;
            }
            if block.free_count() > 0 {
                return Ok(true);
            }
            claimed.insert(Block::id(&block.cidr));
        }
        let block_len = self.conf.block_len;
        Ok(self
            .conf
            .pools
            .iter()
            .any(|pool| candidates(pool, block_len, "").any(|b| !claimed.contains(&Block::id(&b)))))
    }
}
