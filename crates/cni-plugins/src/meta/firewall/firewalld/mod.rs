//! The firewalld backend: the container's addresses (as `/32` and `/128` sources) are
//! bound to a firewalld zone (`firewalldZone`, default `trusted`) in firewalld's runtime
//! configuration, over D-Bus, as the reference does; firewalld then accepts their traffic
//! in its own ruleset.
//!
//! Chosen when `backend` is `firewalld`, and when no `backend` is given and firewalld runs
//! (its name has an owner on the system bus). The bus is only opened in those cases: a
//! configuration naming another backend never touches it.
//!
//! ADD records the sources it bound itself ([`record`]); DEL and GC remove those, so a
//! source the administrator bound is never taken away by GC. DEL also removes the
//! `prevResult` addresses from the zone, as the reference does, so that containers the
//! reference started on a swapped node do not leave their sources behind.

pub mod bus;
pub mod record;
pub mod wire;

use std::collections::BTreeSet;
use std::path::Path;

use cni_sdk::{CniError, ErrorCode, Request};

use self::bus::{Added, BusError, Firewalld};
use self::record::{Record, Source};
use super::config::{Backend, FirewallConf};
use super::target::Target;
use crate::common::rollback::{Rollback, Undo};

/// Zone names as firewalld accepts them in practice (the names of its zone files).
pub fn valid_zone(zone: &str) -> bool {
    !zone.is_empty()
        && zone.len() <= bus::MAX_ZONE_LEN
        && zone.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !zone.starts_with('.')
}

/// The firewalld connection when firewalld is the backend: always with `backend:
/// "firewalld"` (an error when it does not run), and with no `backend` when it runs.
/// `None`: another backend applies.
pub fn select(conf: &FirewallConf) -> Result<Option<Firewalld>, CniError> {
    match (conf.backend, conf.backend_given) {
        (Backend::Firewalld, _) => Firewalld::connect().map(Some).map_err(|e| unavailable(&e)),
        (_, true) => Ok(None),
        (_, false) => match Firewalld::connect() {
            Ok(fw) => Ok(Some(fw)),
            Err(BusError::NotRunning(_)) => Ok(None),
            // A bus that does not answer properly: the reference would take that as "not
            // running" too, silently; say so, and go on with the default backend.
            Err(e) => {
                eprintln!("firewall: not using firewalld: {e}");
                Ok(None)
            }
        },
    }
}

fn unavailable(e: &BusError) -> CniError {
    CniError::new(ErrorCode::TryAgainLater, format!("backend \"firewalld\": {e}"))
}

fn failed(what: &str, e: BusError) -> CniError {
    match e {
        BusError::NotRunning(_) => unavailable(&e),
        e => CniError::internal(format!("firewalld: {what}: {e}")),
    }
}

/// The sources added so far by a failing ADD, taken back in reverse.
struct AddedSources<'a> {
    fw: &'a Firewalld,
    added: Vec<Source>,
}

impl Undo for AddedSources<'_> {
    fn undo(&mut self) {
        while let Some(source) = self.added.pop() {
            if let Err(e) = self.fw.remove_source(&source.zone, &source.cidr()) {
                eprintln!(
                    "firewall: rollback: cannot remove {} from zone {:?}: {e}",
                    source.cidr(),
                    source.zone
                );
            }
        }
    }
}

/// Binds every address of the result to the zone and records those this call bound.
pub fn add(fw: &Firewalld, req: &Request, conf: &FirewallConf, target: &Target) -> Result<(), CniError> {
    let path = record::record_path(&conf.data_dir, &req.conf.name, &req.attachment());
    let mut record = record::load(&path)?.unwrap_or_else(|| Record {
        container_id: req.container_id.clone(),
        ifname: req.ifname.clone(),
        sources: Vec::new(),
    });
    let mut rollback = Rollback::new(AddedSources { fw, added: Vec::new() });
    for &address in &target.ips {
        let source = Source { zone: conf.firewalld_zone.clone(), address };
        let added = fw.add_source(&source.zone, &source.cidr()).map_err(|e| {
            failed(&format!("add {} to zone {:?} (firewalldZone)", source.cidr(), source.zone), e)
        })?;
        if added == Added::New {
            rollback.added.push(source.clone());
            if !record.sources.contains(&source) {
                record.sources.push(source);
            }
        }
    }
    if !rollback.added.is_empty() {
        record::store(&path, &record)?;
    }
    rollback.keep();
    Ok(())
}

/// Every address of the result is bound to the zone.
pub fn check(fw: &Firewalld, conf: &FirewallConf, target: &Target) -> Result<(), CniError> {
    for &address in &target.ips {
        let source = record::source_of(address);
        let zone = fw.zone_of_source(&source).map_err(|e| failed(&format!("zone of {source}"), e))?;
        if zone != conf.firewalld_zone {
            let actual = if zone.is_empty() { "no zone".to_string() } else { format!("zone {zone:?}") };
            return Err(CniError::internal(format!(
                "firewalld: {source} is in {actual}, expected firewalldZone {:?}",
                conf.firewalld_zone
            )));
        }
    }
    Ok(())
}

/// Removes the attachment's recorded sources and, when firewalld is the backend, the
/// `prevResult` addresses from the zone. firewalld not running is success: its runtime
/// configuration, where the sources were, went with it.
pub fn del(req: &Request, conf: &FirewallConf, target: Option<&Target>) -> Result<(), CniError> {
    let path = record::record_path(&conf.data_dir, &req.conf.name, &req.attachment());
    let record = record::load(&path)?;
    let maybe_firewalld = conf.backend == Backend::Firewalld || !conf.backend_given;
    if record.is_none() && !(maybe_firewalld && target.is_some_and(|t| !t.ips.is_empty())) {
        return Ok(());
    }
    let fw = match Firewalld::connect() {
        Ok(fw) => fw,
        Err(BusError::NotRunning(_)) => return record::remove(&path),
        Err(e) => return Err(failed("connect", e)),
    };
    let mut sources: BTreeSet<(String, String)> =
        record.iter().flat_map(|r| &r.sources).map(|s| (s.zone.clone(), s.cidr())).collect();
    if maybe_firewalld {
        let prev = target.map(|t| t.ips.as_slice()).unwrap_or_default();
        sources.extend(prev.iter().map(|&ip| (conf.firewalld_zone.clone(), record::source_of(ip))));
    }
    remove_sources(&fw, &sources)?;
    record::remove(&path)
}

fn remove_sources(fw: &Firewalld, sources: &BTreeSet<(String, String)>) -> Result<(), CniError> {
    for (zone, source) in sources {
        match fw.remove_source(zone, source) {
            Ok(_) | Err(BusError::NotRunning(_)) => {}
            Err(e) => return Err(failed(&format!("remove {source} from zone {zone:?}"), e)),
        }
    }
    Ok(())
}

/// Removes the recorded sources of the network's attachments that are not in the valid
/// list. Only opens the bus when there is something to remove.
pub fn gc(req: &Request, data_dir: &Path) -> Result<(), CniError> {
    let valid = req.valid_attachments()?;
    let stale: Vec<_> = record::list(data_dir, &req.conf.name)?
        .into_iter()
        .filter(|(_, r)| !valid.iter().any(|a| a.container_id == r.container_id && a.ifname == r.ifname))
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let fw = match Firewalld::connect() {
        Ok(fw) => Some(fw),
        Err(BusError::NotRunning(_)) => None,
        Err(e) => return Err(failed("connect", e)),
    };
    let mut first_error = None;
    for (path, r) in stale {
        let sources = r.sources.iter().map(|s| (s.zone.clone(), s.cidr())).collect();
        let removed = match &fw {
            Some(fw) => remove_sources(fw, &sources),
            None => Ok(()),
        };
        // A record whose sources could not be removed stays, for the next GC.
        if let Err(e) = removed.and_then(|()| record::remove(&path)) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_names() {
        for ok in ["trusted", "public", "my-zone_2", "a.b"] {
            assert!(valid_zone(ok), "{ok}");
        }
        for bad in ["", ".hidden", "a b", "a/b", "a\nb", &"z".repeat(65)] {
            assert!(!valid_zone(bad), "{bad:?}");
        }
    }
}
