//! A lease the daemon keeps: its phase (RFC 2131's bound, renewing, rebinding, expired;
//! DHCPv6's T1/T2 map onto the same), and the state its maintenance thread and the request
//! handlers share.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::lease::{unix_now, Leased};
use crate::store::Record;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Bound,
    Renewing,
    Rebinding,
    Expired,
}

impl Phase {
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Bound => "bound",
            Phase::Renewing => "renewing",
            Phase::Rebinding => "rebinding",
            Phase::Expired => "expired",
        }
    }
}

pub(super) struct TrackedState {
    pub(super) record: Record,
    pub(super) phase: Phase,
    pub(super) last_error: String,
    /// Set by DEL/GC: the maintenance thread stops and never writes the record again.
    pub(super) stopping: bool,
}

/// A lease the daemon keeps, shared between the request handlers and its thread.
pub(super) struct Tracked {
    pub(super) state: Mutex<TrackedState>,
    pub(super) wake: Condvar,
}

impl Tracked {
    pub(super) fn lock(&self) -> MutexGuard<'_, TrackedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until unix time `at` or a stop; true when stopped.
    pub(super) fn sleep_until(&self, at: u64) -> bool {
        let mut state = self.lock();
        loop {
            if state.stopping {
                return true;
            }
            let now = unix_now();
            if now >= at {
                return false;
            }
            // Wake at least every minute: the wall clock may jump (suspend, NTP).
            let wait = Duration::from_secs((at - now).min(60));
            state = self.wake.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    pub(super) fn sleep_for(&self, d: Duration) -> bool {
        self.sleep_until(unix_now() + d.as_secs().max(1))
    }

    pub(super) fn stop(&self) -> Record {
        let mut state = self.lock();
        state.stopping = true;
        self.wake.notify_all();
        state.record.clone()
    }
}

pub(super) fn phase_at(lease: &Leased, now: u64) -> Phase {
    if now < lease.renew_at() {
        Phase::Bound
    } else if now < lease.rebind_at() {
        Phase::Renewing
    } else if now < lease.expires_at() {
        Phase::Rebinding
    } else {
        Phase::Expired
    }
}
