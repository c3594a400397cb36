//! One allocator shared by the concurrent ADDs of a node (the agent's connections, the
//! benchmark's threads), with their allocations combined: while one caller holds the
//! allocator and talks to etcd, the ADDs arriving meanwhile queue up; the next caller to
//! get the allocator takes the whole queue and serves it with
//! [`Allocator::allocate_batch`] (several addresses in one transaction), handing each
//! waiting caller its own result. Under load a node thus pays one etcd round trip per
//! batch instead of one per ADD; alone, an ADD costs what it did before.
//!
//! An ADD that failed because etcd stopped answering mid-call has an unknown outcome: a
//! leader that then lost its quorum may still commit the transaction once its peers are
//! back, after the runtime was told nothing was allocated. The batcher remembers such
//! ADDs and, after its next batch that etcd answered, releases whatever they left, unless
//! the runtime has repeated the ADD meanwhile (which then gets that address).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use super::allocator::{Allocation, Allocator};
use super::error::EtcdIpamError;
use super::metrics::AgentMetrics;

type Reply = Sender<Result<Allocation, EtcdIpamError>>;

/// The most ADDs of unknown outcome remembered for release; beyond (a long outage under
/// load) what they may have left waits for the runtime's DEL or GC, as it did before.
const MAX_UNCERTAIN: usize = 4096;

pub struct Batcher {
    allocator: Mutex<Allocator>,
    pending: Mutex<Vec<(String, Reply)>>,
    /// Handle ids of ADDs reported failed whose transaction may yet commit; locked only
    /// while the allocator is held.
    uncertain: Mutex<HashSet<String>>,
    metrics: Option<Arc<AgentMetrics>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Batcher {
    pub fn new(allocator: Allocator) -> Batcher {
        Batcher {
            allocator: Mutex::new(allocator),
            pending: Mutex::new(Vec::new()),
            uncertain: Mutex::new(HashSet::new()),
            metrics: None,
        }
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
        self.forget_repeated(&ids);
        let outcomes = allocator.allocate_batch(&ids);
        let etcd_answered = outcomes.iter().any(Result::is_ok);
        self.remember_uncertain(&ids, &outcomes);
        for ((_, reply), outcome) in batch.into_iter().zip(outcomes) {
            let _ = reply.send(outcome);
        }
        // Only once etcd answers again: while it is away, trying would make the next
        // batch wait out its timeouts twice.
        if etcd_answered {
            self.settle_uncertain(&mut allocator);
        }
        drop(allocator);
        result.recv().unwrap_or_else(|_| Err(EtcdIpamError::Store("the batch lost this ADD".into())))
    }

    /// An ADD being repeated is no longer uncertain: its repeat returns whatever did
    /// commit, and that address is the attachment's.
    fn forget_repeated(&self, ids: &[String]) {
        let mut uncertain = lock(&self.uncertain);
        for id in ids {
            uncertain.remove(id);
        }
    }

    /// Releases what earlier ADDs of unknown outcome may have left, stopping at the first
    /// failure (etcd away again). etcd's answers are linearizable: once a quorum answers,
    /// a lost ADD's transaction has committed or never will.
    fn settle_uncertain(&self, allocator: &mut Allocator) {
        let mut uncertain = lock(&self.uncertain);
        let ids: Vec<String> = uncertain.iter().cloned().collect();
        for id in ids {
            // The release compares the handle's revision: it removes exactly the handle
            // this attachment's lost ADD made, with its block entry.
            match allocator.release(&id) {
                Ok(_) => {
                    uncertain.remove(&id);
                }
                Err(_) => break,
            }
        }
    }

    /// Notes the batch's ADDs that failed with etcd unreachable (their transactions may
    /// have reached a leader).
    fn remember_uncertain(&self, ids: &[String], outcomes: &[Result<Allocation, EtcdIpamError>]) {
        let mut uncertain = lock(&self.uncertain);
        for (id, outcome) in ids.iter().zip(outcomes) {
            if matches!(outcome, Err(EtcdIpamError::Unavailable(_))) && uncertain.len() < MAX_UNCERTAIN {
                uncertain.insert(id.clone());
            }
        }
    }

    /// DEL, and anything else that needs the allocator to itself.
    pub fn with<R>(&self, f: impl FnOnce(&mut Allocator) -> R) -> R {
        f(&mut lock(&self.allocator))
    }

    pub fn release(&self, handle_id: &str) -> Result<Option<IpAddr>, EtcdIpamError> {
        self.with(|allocator| allocator.release(handle_id))
    }
}
