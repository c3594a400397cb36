//! One allocator shared by the concurrent ADDs of a node (the agent's connections, the
//! benchmark's threads), with their allocations combined: while one caller holds the
//! allocator and talks to etcd, the ADDs arriving meanwhile queue up; the next caller to
//! get the allocator takes the whole queue and serves it with
//! [`Allocator::allocate_batch`] (several addresses in one transaction), handing each
//! waiting caller its own result. Under load a node thus pays one etcd round trip per
//! batch instead of one per ADD; alone, an ADD costs what it did before.

use std::net::IpAddr;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use super::allocator::{Allocation, Allocator};
use super::error::EtcdIpamError;
use super::metrics::AgentMetrics;

type Reply = Sender<Result<Allocation, EtcdIpamError>>;

pub struct Batcher {
    allocator: Mutex<Allocator>,
    pending: Mutex<Vec<(String, Reply)>>,
    metrics: Option<Arc<AgentMetrics>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Batcher {
    pub fn new(allocator: Allocator) -> Batcher {
        Batcher { allocator: Mutex::new(allocator), pending: Mutex::new(Vec::new()), metrics: None }
    }

    /// Reports each batch's size to `metrics`.
    pub fn observed(self, metrics: Arc<AgentMetrics>) -> Batcher {
        Batcher { metrics: Some(metrics), ..self }
    }

    /// ADD for `handle_id`, possibly in one transaction with other callers' ADDs.
    pub fn allocate(&self, handle_id: &str) -> Result<Allocation, EtcdIpamError> {
        let (reply, result) = channel();
        lock(&self.pending).push((handle_id.to_string(), reply));
        let mut allocator = lock(&self.allocator);
        // Queued before the allocator was ours: either a previous holder served this ADD
        // already, or it is still in the queue and this holder serves it now.
        if let Ok(done) = result.try_recv() {
            return done;
        }
        let batch = std::mem::take(&mut *lock(&self.pending));
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        if let Some(metrics) = &self.metrics {
            metrics.batch(ids.len());
        }
        for ((_, reply), outcome) in batch.into_iter().zip(allocator.allocate_batch(&ids)) {
            let _ = reply.send(outcome);
        }
        drop(allocator);
        result.recv().unwrap_or_else(|_| Err(EtcdIpamError::Store("the batch lost this ADD".into())))
    }

    /// DEL, and anything else that needs the allocator to itself.
    pub fn with<R>(&self, f: impl FnOnce(&mut Allocator) -> R) -> R {
        f(&mut lock(&self.allocator))
    }

    pub fn release(&self, handle_id: &str) -> Result<Option<IpAddr>, EtcdIpamError> {
        self.with(|allocator| allocator.release(handle_id))
    }
}
