//! One allocator shared by the concurrent ADDs of a node (the agent's connections, the
//! benchmark's threads), with their allocations combined: while one caller holds the
//! allocator and talks to etcd, the ADDs arriving meanwhile queue up; the next caller to
//! get the allocator takes the whole queue and serves it with
//! [`Allocator::allocate_batch`] (several addresses in one transaction), handing each
//! waiting caller its own result. Under load a node thus pays one etcd round trip per
//! batch instead of one per ADD; alone, an ADD costs what it did before. When the node's
//! ADDs have lately come in groups, the holder waits (at most [`MAX_LINGER`]) until as
//! many are queued as the largest recent group: a group commit. Without it, the ADDs of a
//! group that arrive a moment apart (a process start each) split over two round trips.
//!
//! An ADD that failed because etcd stopped answering mid-call has an unknown outcome: a
//! leader that then lost its quorum may still commit the transaction once its peers are
//! back, after the runtime was told nothing was allocated. The batcher remembers such
//! ADDs and, after its next batch that etcd answered, releases whatever they left, unless
//! the runtime has repeated the ADD meanwhile (which then gets that address).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::allocator::{Allocation, Allocator};
use super::error::EtcdIpamError;
use super::metrics::AgentMetrics;

type Reply = Sender<Result<Allocation, EtcdIpamError>>;

/// The most ADDs of unknown outcome remembered for release; beyond (a long outage under
/// load) what they may have left waits for the runtime's DEL or GC, as it did before.
const MAX_UNCERTAIN: usize = 4096;

/// How many of the last batches' sizes a batch waits for (the largest of them).
const RECENT_BATCHES: usize = 4;

/// The longest a batch waits for ADDs expected to join it: a few etcd round trips of a
/// loaded cluster, and nothing next to a pod's start. The group commit it buys: 8 nodes of
/// 4 concurrent ADDs each went from 1.9 to 3.2 ADDs per etcd write (etcd CPU per ADD
/// 0.70 -> 0.44 ms, allocations/s 1,078 -> 1,782; see docs/multi-host.md).
pub const MAX_LINGER: Duration = Duration::from_millis(5);

/// The ADDs waiting for the allocator, handed out as groups (see [`GroupQueue::take`]).
struct GroupQueue<T> {
    pending: Mutex<Vec<T>>,
    /// Signalled as an item joins `pending`, for a taker waiting for the rest of a group.
    arrived: Condvar,
    /// The sizes of the last groups taken, oldest first.
    recent: Mutex<[usize; RECENT_BATCHES]>,
    linger: Duration,
}

impl<T> GroupQueue<T> {
    fn new(linger: Duration) -> GroupQueue<T> {
        GroupQueue {
            pending: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            recent: Mutex::new([1; RECENT_BATCHES]),
            linger,
        }
    }

    fn push(&self, item: T) {
        lock(&self.pending).push(item);
        self.arrived.notify_one();
    }

    /// Everything queued, once as many have arrived as the largest of the last
    /// [`RECENT_BATCHES`] groups, or `linger` has passed: a node whose ADDs have been
    /// coming several at a time waits a moment for the rest of the group rather than
    /// sending the first alone and the others in the next round trip. A node whose ADDs
    /// come one at a time never waits.
    fn take(&self) -> Vec<T> {
        let expected = lock(&self.recent).iter().copied().max().unwrap_or(1);
        let mut pending = lock(&self.pending);
        let deadline = Instant::now() + self.linger;
        while pending.len() < expected {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pending = self.arrived.wait_timeout(pending, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        let group = std::mem::take(&mut *pending);
        let mut recent = lock(&self.recent);
        recent.rotate_left(1);
        recent[RECENT_BATCHES - 1] = group.len();
        group
    }
}

pub struct Batcher {
    allocator: Mutex<Allocator>,
    pending: GroupQueue<(String, Reply)>,
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
            pending: GroupQueue::new(MAX_LINGER),
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
        self.pending.push((handle_id.to_string(), reply));
        let mut allocator = lock(&self.allocator);
        // Queued before the allocator was ours: either a previous holder served this ADD
        // already, or it is still in the queue and this holder serves it now.
        if let Ok(done) = result.try_recv() {
            return done;
        }
        let batch = self.pending.take();
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

#[cfg(test)]
mod tests {
    use super::*;

    use cni_testkit::poll::{finishes, EVENTUALLY};

    /// A queue whose taker would wait an hour: a test that needs the wait to end early
    /// fails at the poll limit instead of passing late.
    fn patient() -> Arc<GroupQueue<u32>> {
        Arc::new(GroupQueue::new(Duration::from_secs(3600)))
    }

    #[test]
    fn one_at_a_time_never_waits() {
        let queue = patient();
        for n in 0..10 {
            queue.push(n);
            let taken = finishes("a lone ADD's take", EVENTUALLY, {
                let queue = queue.clone();
                move || queue.take()
            });
            assert_eq!(taken, [n]);
        }
    }

    #[test]
    fn after_groups_of_three_a_take_waits_for_the_whole_next_group() {
        let queue = patient();
        // Three groups of three: the queue expects three from now on.
        for group in 0..3 {
            for n in 0..3 {
                queue.push(group * 10 + n);
            }
            assert_eq!(queue.take().len(), 3);
        }
        queue.push(100);
        let taker = std::thread::spawn({
            let queue = queue.clone();
            move || queue.take()
        });
        // The taker is waiting for two more; they come from other threads.
        for n in [101, 102] {
            let queue = queue.clone();
            std::thread::spawn(move || queue.push(n)).join().unwrap();
        }
        let taken = finishes("the group's take", EVENTUALLY, move || taker.join().unwrap());
        assert_eq!(taken, [100, 101, 102]);
    }

    #[test]
    fn a_group_that_does_not_fill_goes_when_the_linger_ends() {
        let queue = Arc::new(GroupQueue::new(Duration::from_millis(1)));
        for n in 0..4 {
            queue.push(n);
        }
        assert_eq!(queue.take().len(), 4);
        queue.push(9);
        assert_eq!(finishes("a short linger", EVENTUALLY, move || queue.take()), [9]);
    }
}
