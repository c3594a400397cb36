//! The lease-keeping daemon: answers the plugin's requests and keeps every lease alive.
//!
//! Each lease (an attachment may hold a DHCPv4 and a DHCPv6 one) has a maintenance thread
//! that sleeps until T1, renews, rebinds at T2 and, when the lease expires or the server
//! refuses (a v4 NAK, a v6 NoBinding), logs it, marks
//! the lease `expired` (STATUS shows it, CHECK fails) and keeps trying to get an address
//! again. Threads only ever enter a container's namespace through [`NetNs::run`] to create
//! a socket, which moves them back out before it returns.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::ControlFlow;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use cni_net::NetNs;
use cni_os::socket::{Framing, Server};
use cni_types::trace::is_trace_id;
use cni_types::validate::{validate_container_id, validate_interface_name, validate_network_name};
use cni_types::ErrorCode;

use cni_cli::tracing::{debug, info, warn};

use super::client::{Client, ClientError, ClientParams, Timing};
use super::client6::Client6;
use super::lease::{unix_now, Lease, LeaseTimes, Leased};
use super::metrics::{self, DhcpMetrics, Op as MetricOp};
use super::protocol::{self, LeaseStatus, Op, Request, Response, PROTOCOL_VERSION};
use super::store::{AttachmentKey, Family, Record, Store};
use exchanger::Exchanger;
use requests::Requests;
use tracked::{phase_at, Phase, Tracked, TrackedState};

/// Which lease the daemon means: an attachment's, of one family.
type LeaseId = (AttachmentKey, Family);

/// A retry after a failed renewal waits half the time left to the next deadline (RFC 2131
/// 4.4.5), at least this...
const MIN_RETRY: Duration = Duration::from_secs(1);
/// ...and at most this (the RFC's floor of 60 s is for leases of hours; ours may be short).
const MAX_RETRY: Duration = Duration::from_secs(60);
/// How many released addresses the daemon remembers (to ask for them again, option 50, when
/// the same attachment comes back); the memory is a hint, so it is simply cleared when full.
const MAX_REMEMBERED: usize = 4096;

#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    /// Prepended to every namespace path (the daemon may run in a container that sees the
    /// host's filesystem under a prefix).
    pub host_prefix: String,
    pub timing: Timing,
}

pub struct Daemon {
    settings: Settings,
    store: Store,
    leases: Mutex<HashMap<LeaseId, Arc<Tracked>>>,
    /// The address each recently deleted attachment had: servers that pick addresses by
    /// hardware address (a new veth has a new one) give it back when asked.
    released: Mutex<HashMap<LeaseId, IpAddr>>,
    metrics: DhcpMetrics,
}

impl Daemon {
    pub fn new(settings: Settings) -> std::io::Result<Arc<Daemon>> {
        let store = Store::open(&settings.state_dir)?;
        Ok(Arc::new(Daemon {
            settings,
            store,
            leases: Mutex::new(HashMap::new()),
            released: Mutex::new(HashMap::new()),
            metrics: DhcpMetrics::default(),
        }))
    }

    /// What the daemon counts (kept whether or not it is served).
    pub fn metrics(&self) -> &DhcpMetrics {
        &self.metrics
    }

    /// For `/healthz`: healthy while no held lease is lost (expired, the server silent or
    /// refusing); the daemon then cannot keep those containers' addresses.
    pub fn health(&self) -> Result<String, String> {
        let leases = self.leases();
        let lost = leases.values().filter(|t| t.lock().phase == Phase::Expired).count();
        match lost {
            0 => Ok(format!("{} leases held", leases.len())),
            n => Err(format!("{n} of {} leases lost (expired; no server renewed them)", leases.len())),
        }
    }

    fn leases(&self) -> MutexGuard<'_, HashMap<LeaseId, Arc<Tracked>>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn netns_path(&self, netns: &str) -> PathBuf {
        PathBuf::from(format!("{}{netns}", self.settings.host_prefix))
    }

    fn client(&self, record: &Record) -> Result<Exchanger, ClientError> {
        let ns = NetNs::open(self.netns_path(&record.netns))?;
        let (ifname, params, timing) = (&record.key.ifname, &record.params, self.settings.timing);
        Ok(match record.family {
            Family::V4 => Exchanger::V4(Client::open(&ns, ifname, params.clone(), timing)?),
            Family::V6 => Exchanger::V6(Client6::open(&ns, ifname, params, timing)?),
        })
    }

    /// Resumes the leases a previous run left on disk: those whose namespace and interface
    /// still exist are kept (and renewed when due); the others are forgotten.
    pub fn resume(self: &Arc<Daemon>) -> std::io::Result<()> {
        for path in self.store.remove_abandoned_temp_files()? {
            info!(path = %path.display(), "removed a record whose save a crash interrupted");
        }
        for (old, new) in self.store.migrate_legacy_names()? {
            info!(from = %old.display(), to = %new.display(), "renamed a record named as earlier versions did");
        }
        let (records, unreadable) = self.store.load_all()?;
        for (path, err) in unreadable {
            warn!(path = %path.display(), error = %err, "ignoring an unreadable lease record");
        }
        for record in records {
            let alive = NetNs::open(self.netns_path(&record.netns))
                .and_then(|ns| cni_net::Netlink::in_ns(&ns)?.link_by_name(&record.key.ifname))
                .map(|link| link.is_some())
                .unwrap_or(false);
            if !alive {
                info!(lease = %record.lease, attachment = %record.key, "forgot a lease: its namespace or interface is gone");
                if let Err(e) = self.store.remove(&record.key, record.family) {
                    warn!(attachment = %record.key, error = %e, "cannot remove a lease record");
                }
                continue;
            }
            info!(lease = %record.lease, attachment = %record.key, "resuming a lease");
            self.track(record);
        }
        Ok(())
    }

    fn track(self: &Arc<Daemon>, record: Record) {
        let key = (record.key.clone(), record.family);
        let phase = phase_at(&record.lease, unix_now());
        let tracked = Arc::new(Tracked {
            state: Mutex::new(TrackedState { record, phase, last_error: String::new(), stopping: false }),
            wake: Condvar::new(),
        });
        let mut leases = self.leases();
        if let Some(old) = leases.insert(key, tracked.clone()) {
            old.stop();
        }
        self.metrics.held(leases.len());
        drop(leases);
        let daemon = self.clone();
        std::thread::spawn(move || daemon.maintain(&tracked));
    }

    /// Saves the record unless the lease was stopped meanwhile (a DEL removed its file).
    fn update(&self, tracked: &Tracked, lease: Option<Leased>, phase: Phase, error: String) {
        let mut state = tracked.lock();
        if state.stopping {
            return;
        }
        state.phase = phase;
        state.last_error = error;
        if let Some(lease) = lease {
            state.record.lease = lease;
            if let Err(e) = self.store.save(&state.record) {
                warn!(attachment = %state.record.key, error = %e, "cannot save a lease");
            }
        }
    }

    /// Keeps one lease alive until it is stopped: each turn does what the lease's phase at
    /// that moment asks for, then sleeps as long as that step says.
    fn maintain(&self, tracked: &Tracked) {
        loop {
            let record = {
                let state = tracked.lock();
                if state.stopping {
                    return;
                }
                state.record.clone()
            };
            let now = unix_now();
            let next = match phase_at(&record.lease, now) {
                Phase::Bound => self.hold_until_renewal(tracked, &record.lease),
                phase @ (Phase::Renewing | Phase::Rebinding) => self.extend(tracked, &record, phase, now),
                Phase::Expired => self.reacquire(tracked, &record),
            };
            if next.is_break() {
                return;
            }
        }
    }

    /// Bound: nothing to do before T1. Breaks when the lease was stopped meanwhile.
    fn hold_until_renewal(&self, tracked: &Tracked, lease: &Leased) -> ControlFlow<()> {
        self.update(tracked, None, Phase::Bound, String::new());
        stopped_if(tracked.sleep_until(lease.renew_at()))
    }

    /// Renewing (T1..T2, with the server that granted the lease) or rebinding (T2..expiry,
    /// with any server). A refusal ends the lease; any other failure retries before the
    /// phase's boundary. Breaks when the lease was stopped during a pause.
    fn extend(&self, tracked: &Tracked, record: &Record, phase: Phase, now: u64) -> ControlFlow<()> {
        let lease = &record.lease;
        let rebind = phase == Phase::Rebinding;
        let boundary = if rebind { lease.expires_at() } else { lease.rebind_at() };
        let limit =
            Duration::from_secs(boundary.saturating_sub(now)).clamp(MIN_RETRY, self.settings.timing.timeout);
        self.update(tracked, None, phase, String::new());
        let outcome = self.client(record).and_then(|c| c.extend(lease, rebind, limit));
        match outcome {
            Ok(new) => {
                info!(
                    lease = %new,
                    attachment = %record.key,
                    seconds = new.lease_secs(),
                    "{}",
                    if rebind { "rebound a lease" } else { "renewed a lease" }
                );
                self.metrics.succeeded(if rebind { MetricOp::Rebind } else { MetricOp::Renew });
                self.update(tracked, Some(new), Phase::Bound, String::new());
            }
            Err(e @ (ClientError::Nak(_) | ClientError::Refused(_))) => {
                self.metrics
                    .failed(if rebind { MetricOp::Rebind } else { MetricOp::Renew }, metrics::reason(&e));
                let why = match e {
                    ClientError::Nak(msg) => format!("DHCPNAK {}", msg.unwrap_or_default()),
                    ClientError::Refused(status) => status,
                    other => other.to_string(),
                };
                warn!(%lease, attachment = %record.key, reason = %why, "the server refused to extend a lease");
                self.update(tracked, Some(lease.lost()), Phase::Expired, why);
            }
            Err(e) => {
                let op = if rebind { MetricOp::Rebind } else { MetricOp::Renew };
                self.metrics.failed(op, metrics::reason(&e));
                debug!(phase = phase.name(), attachment = %record.key, error = %e, "extending a lease failed; will retry");
                self.update(tracked, None, phase, e.to_string());
                // Half the time left to the boundary, as RFC 2131 says, but never
                // past it: a renewal that overran T2 goes on to rebinding at once
                // instead of sleeping through the rebinding window into expiry.
                let left = Duration::from_secs(boundary.saturating_sub(unix_now()));
                let pause = (left / 2).clamp(MIN_RETRY, MAX_RETRY).min(left);
                if !pause.is_zero() {
                    return stopped_if(tracked.sleep_for(pause));
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Expired: asks for a new lease, preferring the old address, and retries until one
    /// comes. Breaks when the lease was stopped during a pause.
    fn reacquire(&self, tracked: &Tracked, record: &Record) -> ControlFlow<()> {
        let lease = &record.lease;
        let first = tracked.lock().phase != Phase::Expired;
        if first {
            info!(%lease, attachment = %record.key, "a lease expired; asking for a new one");
            self.update(tracked, None, Phase::Expired, "lease expired".into());
        }
        match self.client(record).and_then(|c| c.acquire(Some(lease.address().addr()))) {
            Ok(new) => {
                // The daemon does not readdress the container (the interface
                // plugin configured it); a different address makes CHECK fail,
                // so the runtime can re-create the attachment.
                let moved = new.address().addr() != lease.address().addr();
                if moved {
                    warn!(lease = %new, attachment = %record.key, old = %lease, "new lease at another address; the interface still has the old one");
                } else {
                    info!(lease = %new, attachment = %record.key, "new lease");
                }
                self.metrics.succeeded(MetricOp::Acquire);
                self.update(tracked, Some(new), Phase::Bound, String::new());
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.metrics.failed(MetricOp::Acquire, metrics::reason(&e));
                self.update(tracked, None, Phase::Expired, format!("lease expired; {e}"));
                stopped_if(tracked.sleep_for(self.settings.timing.resend_max.clamp(MIN_RETRY, MAX_RETRY)))
            }
        }
    }

    fn add(
        self: &Arc<Daemon>,
        key: AttachmentKey,
        family: Family,
        netns: String,
        params: ClientParams,
        trace: Trace,
    ) -> Response {
        let id = (key.clone(), family);
        let existing = self.leases().get(&id).cloned();
        if let Some(tracked) = existing {
            let state = tracked.lock();
            // A repeated ADD for the same attachment gets its lease back.
            if state.record.netns == netns && state.phase != Phase::Expired && state.record.params == params {
                return Response::with_lease(state.record.lease.clone());
            }
        }
        let record = Record::new(key.clone(), family, netns, params, placeholder_lease());
        let client = match self.client(&record) {
            Ok(c) => c,
            Err(e) => {
                self.metrics.failed(MetricOp::Acquire, metrics::reason(&e));
                return Response::error(
                    ErrorCode::Io as u32,
                    format!("dhcp: {} in {}: {e}", key.ifname, record.netns),
                );
            }
        };
        let previous = self.released.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        let acquired = client.acquire(previous);
        if let Err(e) = &acquired {
            self.metrics.failed(MetricOp::Acquire, metrics::reason(e));
        }
        let lease = match acquired {
            Ok(lease) => lease,
            // No server, or none with an address to spare (NoAddrsAvail): both may pass.
            Err(e @ (ClientError::Timeout(_) | ClientError::Refused(_))) => {
                return Response::error(
                    ErrorCode::TryAgainLater as u32,
                    format!(
                        "dhcp: no {} lease for {} of container {}: {e}",
                        match family {
                            Family::V4 => "DHCPv4",
                            Family::V6 => "DHCPv6",
                        },
                        key.ifname,
                        key.container_id
                    ),
                )
            }
            Err(e) => {
                return Response::error(ErrorCode::Internal as u32, format!("dhcp: acquiring a lease: {e}"))
            }
        };
        let record = Record { lease: lease.clone(), ..record };
        if let Err(e) = self.store.save(&record) {
            self.metrics.failed(MetricOp::Acquire, "store");
            let _ = client.release(&lease);
            return Response::error(ErrorCode::Io as u32, format!("dhcp: saving the lease: {e}"));
        }
        info!(%lease, attachment = %key, seconds = lease.lease_secs(), trace = trace.0.map(display), "leased");
        self.metrics.succeeded(MetricOp::Acquire);
        self.track(record);
        Response::with_lease(lease)
    }

    /// Stops keeping an attachment's leases (of both families) and releases them.
    fn del(&self, key: &AttachmentKey, trace: Trace) -> Response {
        let errors: Vec<String> = [Family::V4, Family::V6]
            .into_iter()
            .map(|family| self.del_one(&(key.clone(), family), trace))
            .filter(|r| !r.ok)
            .map(|r| r.msg)
            .collect();
        if errors.is_empty() {
            Response::ok()
        } else {
            Response::error(ErrorCode::Io as u32, errors.join("; "))
        }
    }

    /// Stops keeping one lease and releases it; nothing to do for an unknown one.
    fn del_one(&self, id: &LeaseId, trace: Trace) -> Response {
        let (key, family) = (&id.0, id.1);
        let removed = {
            let mut leases = self.leases();
            let removed = leases.remove(id);
            self.metrics.held(leases.len());
            removed
        };
        let Some(tracked) = removed else {
            // Untracked, but a damaged record of it may sit on disk (skipped at resume):
            // it goes with the attachment rather than stay for good.
            return match self.store.remove(key, family) {
                Ok(()) => Response::ok(),
                Err(e) => {
                    Response::error(ErrorCode::Io as u32, format!("dhcp: removing the lease record: {e}"))
                }
            };
        };
        let record = tracked.stop();
        {
            let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
            if released.len() >= MAX_REMEMBERED {
                released.clear();
            }
            released.insert(id.clone(), record.lease.address().addr());
        }
        let expired = phase_at(&record.lease, unix_now()) == Phase::Expired;
        if !expired {
            match self.client(&record).and_then(|c| c.release(&record.lease)) {
                Ok(()) => {
                    self.metrics.succeeded(MetricOp::Release);
                    info!(lease = %record.lease, attachment = %key, trace = trace.0.map(display), "released")
                }
                // The namespace may be gone already (DEL after the container died).
                Err(e) => {
                    self.metrics.failed(MetricOp::Release, metrics::reason(&e));
                    info!(attachment = %key, error = %e, trace = trace.0.map(display), "cannot send DHCPRELEASE")
                }
            }
        }
        match self.store.remove(key, family) {
            Ok(()) => Response::ok(),
            Err(e) => Response::error(ErrorCode::Io as u32, format!("dhcp: removing the lease record: {e}")),
        }
    }

    fn check(&self, key: AttachmentKey, family: Family) -> Response {
        let Some(tracked) = self.leases().get(&(key.clone(), family)).cloned() else {
            return Response::error(ErrorCode::Internal as u32, format!("dhcp: no lease held for {key}"));
        };
        let state = tracked.lock();
        if state.phase == Phase::Expired {
            return Response::error(
                ErrorCode::Internal as u32,
                format!("dhcp: the lease of {key} is lost: {}", state.last_error),
            );
        }
        Response::with_lease(state.record.lease.clone())
    }

    fn gc(&self, network: &str, valid: &[protocol::ValidAttachment], trace: Trace) -> Response {
        let doomed: Vec<LeaseId> = self
            .leases()
            .keys()
            .filter(|(k, _)| k.network == network)
            .filter(|(k, _)| !valid.iter().any(|v| v.container_id == k.container_id && v.ifname == k.ifname))
            .cloned()
            .collect();
        let errors: Vec<String> =
            doomed.iter().map(|id| self.del_one(id, trace)).filter(|r| !r.ok).map(|r| r.msg).collect();
        if errors.is_empty() {
            Response::ok()
        } else {
            Response::error(ErrorCode::Io as u32, errors.join("; "))
        }
    }

    fn status(&self) -> Response {
        let mut leases: Vec<LeaseStatus> = self
            .leases()
            .values()
            .map(|t| {
                let s = t.lock();
                LeaseStatus {
                    key: s.record.key.clone(),
                    address: s.record.lease.to_string(),
                    state: s.phase.name().into(),
                    last_error: s.last_error.clone(),
                }
            })
            .collect();
        leases.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.address.cmp(&b.address)));
        Response { leases, ..Response::ok() }
    }

    pub fn handle(self: &Arc<Daemon>, request: Request) -> Response {
        if request.version != PROTOCOL_VERSION {
            return Response::error(
                ErrorCode::IncompatibleVersion as u32,
                format!("dhcp daemon speaks protocol version {PROTOCOL_VERSION}, not {}", request.version),
            );
        }
        // Any local client may connect: names become file names and the namespace path is
        // entered, so both are checked here too, not only by the plugin.
        let key = match &request.op {
            Op::Add { key, .. } | Op::Del { key } | Op::Check { key, .. } => Some(key),
            _ => None,
        };
        if let Some(key) = key {
            let valid = validate_network_name(&key.network)
                .and_then(|()| validate_container_id(&key.container_id))
                .and_then(|()| validate_interface_name(&key.ifname));
            if let Err(e) = valid {
                return Response::error(e.code, format!("dhcp daemon: {}", e.msg));
            }
        }
        if let Op::Add { netns, .. } = &request.op {
            if !netns.starts_with('/') {
                return Response::error(
                    ErrorCode::InvalidEnvironment as u32,
                    format!("dhcp daemon: netns {netns:?} is not an absolute path"),
                );
            }
        }
        // Root's plugins send it; still only a well-formed id reaches the log.
        let trace = Trace(request.trace.as_deref().filter(|id| is_trace_id(id)));
        match request.op {
            Op::Add { key, netns, params, family } => self.add(key, family, netns, params, trace),
            Op::Del { key } => self.del(&key, trace),
            Op::Check { key, family } => self.check(key, family),
            Op::Gc { network, valid } => self.gc(&network, &valid, trace),
            Op::Status => self.status(),
        }
    }

    /// Serves requests on `listener` until it fails, through the workspace's root-only
    /// request server (`cni_os::socket`): requests of at most 1 MiB, one deadline for
    /// the whole request, a fixed number of connections at once (an acquisition takes
    /// seconds, so each has its own thread, but never more than the cap).
    pub fn serve(self: &Arc<Daemon>, listener: UnixListener) -> std::io::Result<()> {
        Server::new(listener, Framing::UntilEof, "dhcp request").serve(Arc::new(Requests(self.clone())))
    }
}

/// The runtime's trace id of the request being served: the `trace` field of its events
/// (`trace.0.map(display)`: tracing's macros bring `display` into scope themselves).
#[derive(Clone, Copy)]
struct Trace<'a>(Option<&'a str>);

/// The lease of a record not yet acquired (only used to find the client's namespace).
fn placeholder_lease() -> Leased {
    Leased::V4(Lease {
        address: ipnet::Ipv4Net::default(),
        server_id: Ipv4Addr::UNSPECIFIED,
        routers: Vec::new(),
        classless_routes: Vec::new(),
        static_routes: Vec::new(),
        dns_servers: Vec::new(),
        domain: None,
        search: Vec::new(),
        mtu: None,
        times: LeaseTimes::default(),
    })
}

/// A maintenance step's verdict from a sleep of the lease's: `Break` when the sleep was cut
/// short because the lease was stopped.
fn stopped_if(stopped: bool) -> ControlFlow<()> {
    if stopped {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

mod exchanger;
mod requests;
#[cfg(test)]
mod tests;
mod tracked;
