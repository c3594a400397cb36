//! host-local IPAM: hands out addresses from configured ranges and records them on disk in
//! the reference's layout, so that the Go plugin and this one can replace each other on a
//! running node (allocations made by either are seen and released by the other).
//!
//! - [`config`]: the configuration (ranges, routes, requested addresses), parsed in one place.
//! - [`store`]: the on-disk layout and its lock.
//! - [`index`]: the per-attachment index that keeps ADD/DEL/CHECK from scanning every
//!   allocation, and why it is safe next to the Go plugin.
//! - [`allocator`]: next-fit allocation within a range set.
//!
//! The functions below are the plugin-facing API; each locks the network directory for its
//! whole duration (as the reference does), so concurrent plugin processes — ours or Go's —
//! never hand out the same address.
//!
//! [`HostLocal`] wires them into the plugin SDK: ADD returns the abbreviated IPAM result
//! (addresses with gateways, the configured routes, DNS from `resolvConf`); DEL releases by
//! the prevResult's addresses and the index; CHECK verifies the prevResult's addresses; GC
//! releases everything not in `cni.dev/valid-attachments`; STATUS fails with code 50 when a
//! range set is full.

pub mod allocator;
pub mod config;
pub mod error;
pub mod index;
pub mod range;
pub mod store;
mod table;

use cni_sdk::{Attachment, CniError, CniResult, GcErrors, Plugin, Request};
use cni_types::{Dns, IpConfig, Route};
use std::collections::HashSet;
use std::net::IpAddr;

pub use allocator::Allocation;
use allocator::Session;
pub use config::{HostLocalConf, IpSource, RequestedIp, RouteSpec, DEFAULT_DATA_DIR};
use error::codes;
pub use error::HostLocalError;
use index::Index;
use store::{Holder, Reservation, Store};

/// Opens and locks the network directory of `conf` with a complete index.
fn open_session(conf: &HostLocalConf) -> Result<Session, HostLocalError> {
    config::validate_network_name(&conf.network)?;
    let store = Store::open(&conf.data_dir, &conf.network)?;
    Session::open(store, conf.range_sets.len())
}

/// Runs a modifying operation between `begin_changes` and `finish_changes`. After an I/O
/// failure the stamp stays absent, so the next operation rebuilds the index from disk.
/// Failing to write the stamp is not an error of the operation: it only costs the next
/// operation a rebuild.
fn with_changes<T>(
    session: &Session,
    op: impl FnOnce() -> Result<T, HostLocalError>,
) -> Result<T, HostLocalError> {
    session.begin_changes()?;
    let result = op();
    if !matches!(result, Err(HostLocalError::Io { .. })) {
        let _ = session.finish_changes();
    }
    result
}

/// For each range set, the requested address to honour. Requests of lower precedence
/// that compete with a higher one for the same set are dropped; requests that fit no set, or
/// that compete at equal precedence, are returned as unfulfillable.
fn assign_requests(conf: &HostLocalConf) -> (Vec<Option<IpAddr>>, Vec<IpAddr>) {
    let mut per_set = vec![None; conf.range_sets.len()];
    let mut unfulfillable = Vec::new();
    for (set_index, set) in conf.range_sets.iter().enumerate() {
        let in_set: Vec<&RequestedIp> = conf.requested.iter().filter(|r| set.contains(r.ip)).collect();
        let Some(top) = in_set.iter().map(|r| r.source).max() else {
            continue;
        };
        let mut winners = in_set.iter().filter(|r| r.source == top);
        per_set[set_index] = winners.next().map(|r| r.ip);
        unfulfillable.extend(winners.map(|r| r.ip));
    }
    for request in &conf.requested {
        if !conf.range_sets.iter().any(|s| s.contains(request.ip)) {
            unfulfillable.push(request.ip);
        }
    }
    (per_set, unfulfillable)
}

/// ADD: one address per range set for (container_id, ifname), honouring requested
/// addresses. On failure, addresses reserved by this call are released again.
pub fn allocate(
    conf: &HostLocalConf,
    container_id: &str,
    ifname: &str,
) -> Result<Vec<Allocation>, HostLocalError> {
    let (requests, unfulfillable) = assign_requests(conf);
    if !unfulfillable.is_empty() {
        return Err(HostLocalError::RequestedNotAllocated(unfulfillable));
    }
    let session = open_session(conf)?;
    with_changes(&session, || {
        let mut allocations = Vec::with_capacity(conf.range_sets.len());
        let mut reserved_here = Vec::new();
        for (set_index, set) in conf.range_sets.iter().enumerate() {
            match session.allocate_in_set(set_index, set, container_id, ifname, requests[set_index]) {
                Ok((allocation, newly_reserved)) => {
                    if newly_reserved {
                        reserved_here.push(allocation.address.addr());
                    }
                    allocations.push(allocation);
                }
                Err(err) => {
                    // Best effort: an address whose file cannot be removed stays indexed,
                    // so a later DEL still finds it.
                    for ip in reserved_here {
                        if session.store().release(ip).is_ok() {
                            let _ = session.index().remove(container_id, ifname, ip);
                        }
                    }
                    return Err(err);
                }
            }
        }
        Ok(allocations)
    })
}

/// What DEL did.
#[derive(Debug, Default)]
pub struct Released {
    /// Addresses whose file (or what stood in its place) was removed.
    pub released: Vec<IpAddr>,
}

/// DEL: releases every address held by (container_id, ifname). `known_ips` (the
/// prevResult's addresses, if any) are checked first; then the index. Files that name
/// another attachment are left alone. A file that names nobody (empty, garbage, a link), a
/// directory in the file's place, or a file holding only a prefix of this attachment's
/// record (cut short by a crash) is released when the prevResult or a trusted index entry
/// says the address is this attachment's: otherwise it would stay reserved for good (GC
/// releases it too, but not every runtime runs GC). Idempotent.
pub fn release(
    conf: &HostLocalConf,
    container_id: &str,
    ifname: &str,
    known_ips: &[IpAddr],
) -> Result<Released, HostLocalError> {
    let session = open_session(conf)?;
    with_changes(&session, || {
        let store = session.store();
        let vouched: Vec<IpAddr> = if session.index_trusted() && Index::can_index(container_id, ifname) {
            session.index().candidates(container_id, ifname)
        } else {
            Vec::new()
        };
        let mut candidates: Vec<IpAddr> = known_ips.to_vec();
        candidates.extend(vouched.iter().copied());
        candidates.extend(session.held_by(container_id, ifname)?);
        let mut outcome = Released::default();
        for ip in candidates {
            if outcome.released.contains(&ip) {
                continue;
            }
            let ours = match store.reservation(ip)? {
                Reservation::Free => false,
                Reservation::Held(holder) => {
                    holder.is(container_id, ifname) || holder.is_truncation_of(container_id, ifname)
                }
                Reservation::Unreadable | Reservation::NotAFile => true,
            };
            if ours && store.release(ip)? {
                outcome.released.push(ip);
            }
        }
        session.index().forget(container_id, ifname)?;
        Ok(outcome)
    })
}

/// CHECK: every address in `expected_ips` (the prevResult's) must be held by the
/// attachment; with none expected, the attachment must hold at least one address.
pub fn check(
    conf: &HostLocalConf,
    container_id: &str,
    ifname: &str,
    expected_ips: &[IpAddr],
) -> Result<(), HostLocalError> {
    let session = open_session(conf)?;
    let held = session.held_by(container_id, ifname)?;
    for ip in expected_ips {
        if !held.contains(ip) && !session.store().is_held_by(*ip, container_id, ifname)? {
            return Err(HostLocalError::CheckFailed(format!(
                "address {ip} is not allocated to container {container_id} interface {ifname}"
            )));
        }
    }
    if expected_ips.is_empty() && held.is_empty() {
        return Err(HostLocalError::CheckFailed(format!(
            "Failed to find address added by container {container_id}"
        )));
    }
    Ok(())
}

/// What GC did.
#[derive(Debug, Default)]
pub struct GcOutcome {
    /// Addresses released (unknown holders and unreadable files).
    pub released: Vec<IpAddr>,
    /// Addresses whose file could not be removed, and why; GC carried on past them.
    pub failures: Vec<(IpAddr, HostLocalError)>,
}

/// GC: releases every allocation of the network whose holder is not in `valid`, including
/// empty or garbage files, links and directories in an address file's place (held by
/// nobody). A legacy file (container ID only) stays if any valid attachment has that
/// container ID.
pub fn gc(conf: &HostLocalConf, valid: &[Attachment]) -> Result<GcOutcome, HostLocalError> {
    let valid: HashSet<&Attachment> = valid.iter().collect();
    let is_valid = |holder: &Holder| match &holder.ifname {
        Some(ifname) => valid.contains(&Attachment::new(holder.container_id.clone(), ifname.clone())),
        None => valid.iter().any(|k| k.container_id == holder.container_id),
    };
    let session = open_session(conf)?;
    with_changes(&session, || {
        let store = session.store();
        let mut outcome = GcOutcome::default();
        let mut kept = Vec::new();
        let scan = store.scan()?;
        let not_files = scan.not_files.into_iter().map(|ip| (ip, None));
        for (ip, holder) in scan.files.into_iter().chain(not_files) {
            if holder.as_ref().is_some_and(is_valid) {
                kept.push((ip, holder));
                continue;
            }
            match store.release(ip) {
                Ok(_) => outcome.released.push(ip),
                Err(err) => {
                    outcome.failures.push((ip, err));
                    kept.push((ip, holder));
                }
            }
        }
        session.index().rebuild(&kept)?;
        Ok(outcome)
    })
}

/// STATUS: fails with [`HostLocalError::Exhausted`] naming the first range set that has no
/// free address (the plugin reports it as code 50). Read-only.
pub fn status(conf: &HostLocalConf) -> Result<(), HostLocalError> {
    config::validate_network_name(&conf.network)?;
    let store = Store::open(&conf.data_dir, &conf.network)?;
    for (set_index, set) in conf.range_sets.iter().enumerate() {
        if !allocator::has_free_address(&store, set_index, set) {
            return Err(HostLocalError::Exhausted { range_set: set.to_string() });
        }
    }
    Ok(())
}

/// The host-local IPAM plugin.
pub struct HostLocal;

impl From<HostLocalError> for CniError {
    fn from(err: HostLocalError) -> CniError {
        CniError::new(err.cni_code(), err.to_string())
    }
}

pub(crate) fn load(req: &Request) -> Result<HostLocalConf, CniError> {
    // As the reference: CNI_ARGS may carry only IP unless IgnoreUnknown is set.
    req.args.check_known(&["IP"])?;
    let args = req.args.to_env_string();
    Ok(HostLocalConf::parse(&req.stdin, Some(&args))?)
}

/// The prevResult's addresses that fall into this configuration's ranges.
fn prev_result_ips(req: &Request, conf: &HostLocalConf) -> Vec<IpAddr> {
    let Ok(Some(prev)) = req.prev_result() else {
        return Vec::new();
    };
    prev.ips
        .iter()
        .map(|ip| ip.address.addr())
        .filter(|ip| conf.range_sets.iter().any(|set| set.contains(*ip)))
        .collect()
}

fn routes(conf: &HostLocalConf) -> Result<Vec<Route>, CniError> {
    conf.routes
        .iter()
        .map(|spec| {
            let mut object = spec.extra.clone();
            object.insert("dst".into(), spec.dst.to_string().into());
            if let Some(gw) = spec.gw {
                object.insert("gw".into(), gw.to_string().into());
            }
            // Folded as the rest of the configuration was (Go decodes `"MTU": 1400` into the
            // route's mtu): the keys kept here are still as the configuration spelt them.
            cni_types::fold::deserialize(&serde_json::Value::from(object))
                .map_err(|(_, e)| CniError::invalid_config(format!("host-local: route to {}: {e}", spec.dst)))
        })
        .collect()
}

/// Reads a resolv.conf-style file the way the reference does: `nameserver`, `domain`,
/// `search` and `options` lines; comments (`#`, `;`) and other lines are skipped.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 2 {
            continue;
        }
        let rest = fields[1..].iter().map(|s| s.to_string());
        match fields[0] {
            "nameserver" => dns.nameservers.push(fields[1].to_string()),
            "domain" => dns.domain = fields[1].to_string(),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

fn dns(conf: &HostLocalConf) -> Result<Dns, CniError> {
    match &conf.resolv_conf {
        None => Ok(Dns::default()),
        Some(path) => std::fs::read_to_string(path)
            .map(|text| parse_resolv_conf(&text))
            .map_err(|e| CniError::io(format!("host-local: reading resolvConf {path}: {e}"))),
    }
}

impl Plugin for HostLocal {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = load(req)?;
        // Everything that can fail without side effects comes before the allocation.
        let routes = routes(&conf)?;
        let dns = dns(&conf)?;
        let allocations = allocate(&conf, &req.container_id, &req.ifname)?;
        Ok(CniResult {
            interfaces: Vec::new(),
            ips: allocations
                .into_iter()
                .map(|a| IpConfig { interface: None, address: a.address, gateway: Some(a.gateway) })
                .collect(),
            routes,
            dns,
        })
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let known = prev_result_ips(req, &conf);
        release(&conf, &req.container_id, &req.ifname, &known)?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let expected = prev_result_ips(req, &conf);
        Ok(check(&conf, &req.container_id, &req.ifname, &expected)?)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        let GcOutcome { failures, .. } = gc(&conf, &req.valid_attachments()?)?;
        let mut errors = GcErrors::new();
        for (ip, failure) in failures {
            errors.push(format!("address {ip}"), failure.into());
        }
        Ok(errors.into_result()?)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let conf = load(req)?;
        match status(&conf) {
            Err(err @ HostLocalError::Exhausted { .. }) => {
                Err(CniError::new(codes::NOT_AVAILABLE, err.to_string()))
            }
            other => Ok(other?),
        }
    }

    fn about(&self) -> String {
        "host-local IPAM (cni-rs): allocates addresses from ranges, state on the local disk".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_attributes_match_without_regard_to_case() {
        let conf = HostLocalConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","ipam":{"subnet":"10.1.0.0/16",
            "routes":[{"Dst":"10.9.0.0/16","MTU":1400,"AdvMSS":1360,"table":100}]}}"#,
            None,
        )
        .unwrap();
        let routes = routes(&conf).unwrap();
        assert_eq!((routes[0].mtu, routes[0].advmss, routes[0].table), (Some(1400), Some(1360), Some(100)));
    }

    #[test]
    fn resolv_conf_like_the_reference() {
        let dns = parse_resolv_conf(
            "# comment\n; other\nnameserver 10.0.0.53\nnameserver fd00::53\ndomain example.org\n\
             search a.example b.example\noptions ndots:2 rotate\nsortlist 1.2.3.4\nnameserver\n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.53", "fd00::53"]);
        assert_eq!(dns.domain, "example.org");
        assert_eq!(dns.search, ["a.example", "b.example"]);
        assert_eq!(dns.options, ["ndots:2", "rotate"]);
    }
}
