//! The daemon's client of either address family: one lease record holds a DHCPv4 or a
//! DHCPv6 lease, and the daemon acquires, extends and releases it through this.

use std::net::IpAddr;
use std::time::Duration;

use crate::client::{Client, ClientError};
use crate::client6::Client6;
use crate::lease::Leased;

/// A client of either family, for the lease a record holds.
pub(super) enum Exchanger {
    V4(Client),
    V6(Client6),
}

impl Exchanger {
    pub(super) fn acquire(&self, previous: Option<IpAddr>) -> Result<Leased, ClientError> {
        match (self, previous) {
            (Exchanger::V4(c), Some(IpAddr::V4(a))) => c.acquire(Some(a)).map(Leased::V4),
            (Exchanger::V4(c), _) => c.acquire(None).map(Leased::V4),
            (Exchanger::V6(c), Some(IpAddr::V6(a))) => c.acquire(Some(a)).map(Leased::V6),
            (Exchanger::V6(c), _) => c.acquire(None).map(Leased::V6),
        }
    }

    pub(super) fn extend(
        &self,
        lease: &Leased,
        rebind: bool,
        limit: Duration,
    ) -> Result<Leased, ClientError> {
        match (self, lease) {
            (Exchanger::V4(c), Leased::V4(l)) => c.extend(l, rebind, limit).map(Leased::V4),
            (Exchanger::V6(c), Leased::V6(l)) => c.extend(l, rebind, limit).map(Leased::V6),
            _ => Err(family_mismatch()),
        }
    }

    pub(super) fn release(&self, lease: &Leased) -> Result<(), ClientError> {
        match (self, lease) {
            (Exchanger::V4(c), Leased::V4(l)) => c.release(l),
            (Exchanger::V6(c), Leased::V6(l)) => c.release(l),
            _ => Err(family_mismatch()),
        }
    }
}

/// A record whose lease is not of its family: damage, never written by the daemon.
fn family_mismatch() -> ClientError {
    ClientError::Io(std::io::Error::other("the record's lease is not of the record's address family"))
}
