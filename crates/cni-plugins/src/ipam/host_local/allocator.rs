//! Allocation within range sets: next-fit after `last_reserved_ip.<n>`, wrapping, never
//! handing out the network address, the IPv4 broadcast address or the gateway — the order
//! in which the reference hands addresses out, so mixed Go/Rust nodes behave alike.
//!
//! Cost: each candidate costs one `stat(2)`, and the free one an exclusive create
//! (`O_CREAT|O_EXCL`) and a write of the holder; next-fit normally succeeds on the first
//! candidate, so an allocation does not depend on how many addresses are held (only a
//! nearly full range set, wrapped around, makes it walk over held addresses).

use std::net::IpAddr;

use ipnet::IpNet;

use super::error::HostLocalError;
use super::index::Index;
use super::range::{from_u128, to_u128, RangeSet};
use super::store::Store;

/// One address handed to an attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The address with the prefix length of its subnet (e.g. `10.0.0.2/24`).
    pub address: IpNet,
    /// The gateway of the range the address came from.
    pub gateway: IpAddr,
    /// Index of the range set in the configuration.
    pub range_set: usize,
}

/// A locked network directory with its attachment index, kept complete (see `index.rs`).
pub struct Session {
    store: Store,
    index: Index,
    range_sets: usize,
    /// Whether the index was complete when the directory was locked, i.e. its entries are
    /// what our own operations recorded rather than what a rebuild read back from files.
    /// Only then does an entry say whose a damaged address file was.
    index_trusted: bool,
}

impl Session {
    /// Locks the directory and makes sure the index is complete, rebuilding it with one scan
    /// if a foreign writer (or an interrupted operation) changed the directory.
    pub fn open(store: Store, range_sets: usize) -> Result<Session, HostLocalError> {
        let mut session = Session { index: Index::new(&store), store, range_sets, index_trusted: true };
        if !session.index.is_complete(range_sets) {
            session.index_trusted = false;
            let allocations = session.store.scan()?.files;
            let rebuilt =
                session.index.rebuild(&allocations).and_then(|()| session.index.mark_complete(range_sets));
            if rebuilt.is_err() {
                // The index is only a hint that we alone write: whatever damaged it (a
                // directory where its table or stamp should be), it is thrown away and
                // built again rather than failing the operation.
                session.index.discard()?;
                session.index.rebuild(&allocations)?;
                session.index.mark_complete(range_sets)?;
            }
        }
        Ok(session)
    }

    /// See the field: whether index entries may vouch for damaged address files.
    pub fn index_trusted(&self) -> bool {
        self.index_trusted
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// To call before modifying the directory (see `Index::invalidate`).
    pub fn begin_changes(&self) -> Result<(), HostLocalError> {
        self.index().invalidate()
    }

    /// To call once the directory and the index agree again.
    pub fn finish_changes(&self) -> Result<(), HostLocalError> {
        self.index().mark_complete(self.range_sets)
    }

    /// Addresses held by (container_id, ifname), verified against their files. Falls back
    /// to a scan only for attachments whose key cannot name an index file.
    pub fn held_by(&self, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>, HostLocalError> {
        if !Index::can_index(container_id, ifname) {
            return Ok(self
                .store
                .scan()?
                .files
                .into_iter()
                .filter(|(_, h)| h.as_ref().is_some_and(|h| h.is(container_id, ifname)))
                .map(|(ip, _)| ip)
                .collect());
        }
        let mut held = Vec::new();
        for ip in self.index().candidates(container_id, ifname) {
            if self.store.is_held_by(ip, container_id, ifname)? {
                held.push(ip);
            }
        }
        Ok(held)
    }

    fn record_reservation(
        &self,
        set_index: usize,
        ip: IpAddr,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), HostLocalError> {
        self.store.set_last_reserved(set_index, ip)?;
        self.index().add(container_id, ifname, ip)
    }

    /// Allocates one address of `set` to the attachment. Returns the allocation and whether
    /// this call reserved it (`false`: the attachment already held the requested address).
    pub fn allocate_in_set(
        &self,
        set_index: usize,
        set: &RangeSet,
        container_id: &str,
        ifname: &str,
        requested: Option<IpAddr>,
    ) -> Result<(Allocation, bool), HostLocalError> {
        match requested {
            Some(ip) => self.allocate_requested(set_index, set, container_id, ifname, ip),
            None => self.allocate_next(set_index, set, container_id, ifname).map(|a| (a, true)),
        }
    }

    fn allocate_requested(
        &self,
        set_index: usize,
        set: &RangeSet,
        container_id: &str,
        ifname: &str,
        ip: IpAddr,
    ) -> Result<(Allocation, bool), HostLocalError> {
        let range_idx = set.range_for(ip).ok_or_else(|| HostLocalError::RequestedNotAllocated(vec![ip]))?;
        let range = &set.ranges[range_idx];
        let reserved_as = if ip == range.gateway {
            Some("the gateway")
        } else if ip == range.subnet.network() {
            Some("the network address")
        } else if ip.is_ipv4() && ip == range.subnet.broadcast() {
            Some("the broadcast address")
        } else {
            None
        };
        if let Some(what) = reserved_as {
            return Err(HostLocalError::RequestedReserved { ip, what, range_set: set.to_string() });
        }
        let allocation = Allocation {
            address: IpNet::new(ip, range.subnet.prefix_len()).expect("prefix of a valid subnet"),
            gateway: range.gateway,
            range_set: set_index,
        };
        if self.store.reserve(ip, container_id, ifname)? {
            self.record_reservation(set_index, ip, container_id, ifname)?;
            return Ok((allocation, true));
        }
        // Asking again for what one already holds (a runtime retrying, podman re-applying
        // its --ip) is not a conflict.
        if self.store.is_held_by(ip, container_id, ifname)? {
            self.index().add(container_id, ifname, ip)?;
            return Ok((allocation, false));
        }
        Err(HostLocalError::RequestedUnavailable { ip, range_set: set.to_string() })
    }

    fn allocate_next(
        &self,
        set_index: usize,
        set: &RangeSet,
        container_id: &str,
        ifname: &str,
    ) -> Result<Allocation, HostLocalError> {
        // The specification forbids a second address from the same range set.
        for held in self.held_by(container_id, ifname)? {
            if set.contains(held) {
                return Err(HostLocalError::AlreadyAllocated {
                    ip: held,
                    container_id: container_id.to_string(),
                });
            }
        }
        let last = self.store.last_reserved(set_index);
        for (range_idx, ip) in NextFit::after(set, last) {
            let range = &set.ranges[range_idx];
            // A stat first passes over held addresses without opening anything. Reserving
            // does not sync (see the store), so this is a cheap filter, not a saving of
            // syncs; the lock is held, so it is accurate, and reserve's exclusive create
            // stays the decision regardless.
            if !range.is_allocatable(ip) || self.store.is_taken(ip) {
                continue;
            }
            if self.store.reserve(ip, container_id, ifname)? {
                self.record_reservation(set_index, ip, container_id, ifname)?;
                return Ok(Allocation {
                    address: IpNet::new(ip, range.subnet.prefix_len()).expect("prefix of a valid subnet"),
                    gateway: range.gateway,
                    range_set: set_index,
                });
            }
        }
        Err(HostLocalError::Exhausted { range_set: set.to_string() })
    }
}

/// Whether some address of `set` is free, probing in next-fit order (read-only; costs one
/// `stat` per held address passed over).
pub fn has_free_address(store: &Store, set_index: usize, set: &RangeSet) -> bool {
    let last = store.last_reserved(set_index);
    NextFit::after(set, last).any(|(r, ip)| set.ranges[r].is_allocatable(ip) && !store.is_taken(ip))
}

/// Visits every address of a range set once, starting right after `last` (or at the first
/// range's start when `last` is not in the set), wrapping from the end of one range to the
/// start of the next and from the last range to the first; `last` itself comes last.
pub struct NextFit<'a> {
    set: &'a RangeSet,
    range_idx: usize,
    value: u128,
    remaining: u128,
}

impl<'a> NextFit<'a> {
    pub fn after(set: &'a RangeSet, last: Option<IpAddr>) -> NextFit<'a> {
        let total = set
            .ranges
            .iter()
            .fold(0u128, |acc, r| acc.saturating_add((to_u128(r.end) - to_u128(r.start)).saturating_add(1)));
        let mut cursor = NextFit { set, range_idx: 0, value: to_u128(set.ranges[0].start), remaining: total };
        if let Some(last) = last {
            if let Some(range_idx) = set.range_for(last) {
                cursor.range_idx = range_idx;
                cursor.value = to_u128(last);
                cursor.step();
            }
        }
        cursor
    }

    fn step(&mut self) {
        let range = &self.set.ranges[self.range_idx];
        if self.value >= to_u128(range.end) {
            self.range_idx = (self.range_idx + 1) % self.set.ranges.len();
            self.value = to_u128(self.set.ranges[self.range_idx].start);
        } else {
            self.value += 1;
        }
    }
}

impl Iterator for NextFit<'_> {
    type Item = (usize, IpAddr);

    fn next(&mut self) -> Option<(usize, IpAddr)> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let item = (self.range_idx, from_u128(self.value, self.set.ranges[self.range_idx].start));
        self.step();
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::super::range::RangeSpec;
    use super::*;

    fn set(specs: &[(&str, Option<&str>, Option<&str>)]) -> RangeSet {
        let specs: Vec<RangeSpec> = specs
            .iter()
            .map(|(subnet, start, end)| RangeSpec {
                subnet: subnet.to_string(),
                range_start: start.map(Into::into),
                range_end: end.map(Into::into),
                gateway: None,
            })
            .collect();
        RangeSet::from_specs(&specs, "t").unwrap()
    }

    fn order(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        NextFit::after(set, last.map(|l| l.parse().unwrap())).map(|(_, ip)| ip.to_string()).collect()
    }

    #[test]
    fn next_fit_wraps_across_ranges() {
        let s = set(&[("10.0.0.0/29", Some("10.0.0.4"), None), ("10.0.1.0/30", None, None)]);
        assert_eq!(order(&s, None), ["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.1", "10.0.1.2"]);
        assert_eq!(order(&s, Some("10.0.0.6")), ["10.0.1.1", "10.0.1.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"]);
        // A last address outside the set restarts at the beginning.
        assert_eq!(order(&s, Some("192.168.0.1"))[0], "10.0.0.4");
    }
}
