//! Reclaiming the addresses of nodes that are gone, after a grace period.
//!
//! Opt-in (`nodeGracePeriodSeconds`): every STATUS and GC on a node renews the node's
//! heartbeat, `seen/<node>`, a key on an etcd lease of the grace period, and marks the
//! node `registered/<node>` (no lease). A node that stops calling loses its `seen` key when
//! the lease expires, by etcd's clock, not the nodes'. GC on any node then reclaims every
//! node that is registered but not seen: it releases the node's handles (one transaction
//! each, as DEL does), deletes the node's blocks that are then empty (compared against the
//! revision read, so a block a racing ADD just used stays), and forgets the node. A node
//! that never sent a heartbeat is never reclaimed.

use cni_etcd::{Compare, Op, Txn};

use super::allocator::Allocator;
use super::block::Block;
use super::error::EtcdIpamError;
use super::keys::Keys;

/// Renews this node's heartbeat (a no-op without `nodeGracePeriodSeconds`).
pub fn heartbeat(allocator: &mut Allocator) -> Result<(), EtcdIpamError> {
    let Some(grace) = allocator.conf.node_grace_seconds else { return Ok(()) };
    let node = allocator.conf.node.clone();
    let seen_key = allocator.keys.seen(&node);
    let previous = allocator.client.get(&seen_key)?;
    let lease = allocator.client.lease_grant(grace)?;
    allocator.client.put(&seen_key, b"", lease)?;
    allocator.client.put(&allocator.keys.registered(&node), b"", 0)?;
    // The put moved the key to the new lease; the old one would linger until its TTL.
    if let Some(old) = previous.filter(|kv| kv.lease != 0 && kv.lease != lease) {
        allocator.client.lease_revoke(old.lease)?;
    }
    Ok(())
}

/// The registered nodes whose heartbeat has expired.
pub fn gone_nodes(allocator: &mut Allocator) -> Result<Vec<String>, EtcdIpamError> {
    let (registered, _) = allocator.client.get_prefix(&allocator.keys.registered_all(), true)?;
    let mut gone = Vec::new();
    for kv in registered {
        let node = Keys::block_id_of(&kv.key);
        if node != allocator.conf.node && allocator.client.get(&allocator.keys.seen(&node))?.is_none() {
            gone.push(node);
        }
    }
    Ok(gone)
}

/// Reclaims a gone node: its handles, its emptied blocks, its registration. Returns the
/// number of addresses released.
pub fn reclaim(allocator: &mut Allocator, node: &str) -> Result<usize, EtcdIpamError> {
    let mut released = 0;
    for (id, handle) in allocator.all_handles()? {
        if handle.node == node && allocator.release(&id)?.is_some() {
            released += 1;
        }
    }
    let (affinities, _) = allocator.client.get_prefix(&allocator.keys.affinities(node), true)?;
    for affinity in affinities {
        let block_id = Keys::block_id_of(&affinity.key);
        let block_key = allocator.keys.block(&block_id);
        let Some(kv) = allocator.client.get(&block_key)? else {
            allocator.client.delete(&affinity.key)?;
            continue;
        };
        let empty = Block::from_json(&kv.value).is_some_and(|b| b.allocations.is_empty());
        if empty {
            // Lost to a racing ADD: the block stays (the next GC tries again).
            allocator.client.txn(&Txn {
                compare: vec![Compare::ModRevision(block_key.clone(), kv.mod_revision)],
                success: vec![Op::delete(block_key), Op::delete(affinity.key.clone())],
                failure: vec![],
            })?;
        }
    }
    let (left, _) = allocator.client.get_prefix(&allocator.keys.affinities(node), true)?;
    if left.is_empty() {
        allocator.client.delete(&allocator.keys.registered(node))?;
    }
    Ok(released)
}
