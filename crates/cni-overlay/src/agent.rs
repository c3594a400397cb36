//! The agent's life: acquire (or re-adopt) the subnet, set up the device, then keep the
//! lease alive and the peers' entries in step with etcd until asked to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_etcd::{Client, Event, Tls, Watch};
use cni_net::{NetNs, Netlink};

use crate::config::Config;
use crate::dataplane::{self, Device, Underlay};
use crate::lease::{self, NodeRecord, SubnetLease};
use crate::metrics::{self, OverlayMetrics};
use crate::peer::{Change, Own, Peers};
use crate::{cniconf, Result};

/// How long one wait on the watch lasts: the stop flag and the keep-alive are looked at
/// between two waits.
const TICK: Duration = Duration::from_millis(250);

/// How long after a kernel request failed for some peer the peers are programmed again.
const RETRY: Duration = Duration::from_secs(2);

fn log(message: impl AsRef<str>) {
    eprintln!("cni-overlay-agent: {}", message.as_ref());
}

struct Agent<'a> {
    config: &'a Config,
    client: Client,
    nl: Netlink,
    underlay: Underlay,
    record: NodeRecord,
    lease: SubnetLease,
    device: Device,
    peers: Peers,
    /// When to program the peers again after some kernel request failed.
    retry_at: Option<Instant>,
    /// The failures last logged, so a failure that persists is not logged every retry.
    failures: Vec<String>,
    metrics: Arc<OverlayMetrics>,
}

/// Runs until `stop` is set (by SIGTERM/SIGINT); errors only when the start fails.
pub fn run(config: &Config, stop: &AtomicBool) -> Result<()> {
    let tls = config.tls.as_ref().map(Tls::load).transpose()?;
    let mut client = Client::with_tls(&config.endpoints, Duration::from_secs(2), tls)?;
    let metrics = Arc::new(OverlayMetrics::default());
    client.observe(metrics.observer());
    if let Some(address) = config.metrics_address {
        let ttl = Duration::from_secs(config.ttl.unsigned_abs());
        let bound = metrics::serve(address, &metrics, ttl)
            .map_err(|e| crate::Error::Io(format!("metrics address {address}"), e))?;
        log(format!("metrics on http://{bound}/metrics"));
    }
    // The namespace is opened once: the netlink socket and the sysctl write stay in it.
    let netns = config.netns.as_ref().map(NetNs::open).transpose()?;
    let mut nl = match &netns {
        Some(ns) => Netlink::in_ns(ns)?,
        None => Netlink::new()?,
    };
    let underlay = dataplane::underlay(&mut nl, &config.iface)?;
    // Derived from the underlay address: the same across restarts and recreated devices.
    let mac = dataplane::vtep_mac(underlay.address);
    let record =
        NodeRecord { node: config.node.clone(), underlay: underlay.address, vtep_mac: mac.to_string() };
    let mut agent = Agent {
        config,
        client,
        nl,
        underlay,
        record,
        lease: SubnetLease { subnet: config.network, lease_id: 0 },
        device: Device { index: 0, mac, mtu: 0 },
        peers: Peers::default(),
        retry_at: None,
        failures: Vec::new(),
        metrics,
    };
    agent.acquire()?;
    // The node routes between its bridge and the overlay.
    match &netns {
        Some(ns) => cni_net::sysctl::write_in(ns, "net/ipv4/ip_forward", "1")?,
        None => cni_net::sysctl::write("net/ipv4/ip_forward", "1")?,
    }
    agent.watch_loop(stop);
    if config.revoke_on_exit {
        match agent.client.lease_revoke(agent.lease.lease_id) {
            Ok(()) => log(format!("revoked the lease of {}", agent.lease.subnet)),
            Err(e) => log(format!("revoking the lease: {e}")),
        }
    }
    log("stopped");
    Ok(())
}

impl Agent<'_> {
    /// Takes (or takes back) the subnet, sets the device up for it and publishes it to CNI.
    fn acquire(&mut self) -> Result<()> {
        let preferred = match self.lease.lease_id {
            0 => cniconf::read_subnet(&self.config.subnet_file),
            _ => Some(self.lease.subnet),
        };
        self.lease = lease::acquire(&mut self.client, self.config, &self.record, preferred)?;
        self.device = dataplane::ensure_device(&mut self.nl, self.config, &self.underlay, self.lease.subnet)?;
        cniconf::write(self.config, self.lease.subnet, self.device.mtu)?;
        log(format!(
            "node {} holds {} (lease {:x}), device {} mtu {}",
            self.config.node, self.lease.subnet, self.lease.lease_id, self.config.device, self.device.mtu
        ));
        Ok(())
    }

    fn own(&self) -> Own {
        Own { subnet: self.lease.subnet, underlay: self.underlay.address }
    }

    fn log_change(change: Change) {
        match change {
            Change::Joined(peer) => {
                log(format!("peer {} joined with {} at {}", peer.node(), peer.subnet(), peer.underlay()))
            }
            Change::Left(peer) => log(format!("peer {} left ({})", peer.node(), peer.subnet())),
            Change::Refused { key, reason } => log(format!("record {key} refused: {reason}")),
            Change::Unchanged => {}
        }
    }

    /// Full range of the records, then the kernel made to match; returns the revision to
    /// watch from.
    fn resync(&mut self) -> Result<i64> {
        let (records, revision) = lease::list(&mut self.client, self.config)?;
        let own = self.own();
        for change in self.peers.replace_all(self.config, &own, &records) {
            self.metrics.change(&change);
            Self::log_change(change);
        }
        self.converge()?;
        Ok(revision)
    }

    /// Programs the believed peers; a peer the kernel refused is logged (once while it
    /// keeps failing the same way) and tried again after [`RETRY`], the others converge.
    fn converge(&mut self) -> Result<()> {
        let failures = dataplane::reconcile(&mut self.nl, &self.device, self.peers.accepted())
            .inspect_err(|_| self.metrics.reconciled(self.peers.accepted().len(), None))?;
        self.metrics.reconciled(self.peers.accepted().len(), Some(failures.len()));
        let failures: Vec<String> = failures.iter().map(ToString::to_string).collect();
        if failures != self.failures {
            for failure in failures.iter().filter(|f| !self.failures.contains(f)) {
                log(format!("programming {failure}; retrying"));
            }
            if failures.is_empty() {
                log("every peer programmed");
            }
        }
        self.retry_at = (!failures.is_empty()).then(|| Instant::now() + RETRY);
        self.failures = failures;
        Ok(())
    }

    /// A resync, then a watch from just after the revision it read: no change is missed
    /// between the two.
    fn resync_and_watch(&mut self) -> Result<Watch> {
        let revision = self.resync()?;
        Ok(self.client.watch_prefix(self.config.subnets_prefix().as_bytes(), revision + 1)?)
    }

    fn apply(&mut self, events: Vec<Event>) -> Result<()> {
        let own = self.own();
        for event in events {
            let change = match event {
                Event::Put(kv) => self.peers.put(self.config, &own, &kv),
                Event::Delete(kv) => self.peers.delete(self.config, &kv.key),
            };
            self.metrics.change(&change);
            Self::log_change(change);
        }
        self.converge()
    }

    /// Renews the lease; true when the subnet had to be acquired again (the peers are then
    /// checked against it afresh).
    fn keepalive(&mut self) -> bool {
        match self.client.lease_keepalive(self.lease.lease_id) {
            Ok(ttl) if ttl > 0 => false,
            Ok(_) => {
                // The lease ran out (etcd unreachable for longer than the TTL): ask for the
                // same subnet again.
                log(format!("lease of {} expired; acquiring again", self.lease.subnet));
                self.metrics.lease_expired();
                if let Err(e) = self.acquire() {
                    log(format!("acquiring: {e}"));
                }
                true
            }
            Err(e) => {
                log(format!("keep-alive: {e}"));
                false
            }
        }
    }

    fn watch_loop(&mut self, stop: &AtomicBool) {
        let mut watch: Option<Watch> = None;
        // Whether a watch ran before: each later resync is a restart.
        let mut watched = false;
        let mut next_keepalive = Instant::now() + self.config.keepalive_interval();
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next_keepalive {
                if self.keepalive() {
                    watch = None;
                }
                next_keepalive = Instant::now() + self.config.keepalive_interval();
            }
            if self.retry_at.is_some_and(|at| Instant::now() >= at) {
                if let Err(e) = self.converge() {
                    log(format!("programming peers: {e}; resyncing"));
                    watch = None;
                }
            }
            let Some(current) = watch.as_mut() else {
                match self.resync_and_watch() {
                    Ok(w) => {
                        if watched {
                            self.metrics.watch_restarted();
                        }
                        watched = true;
                        watch = Some(w);
                    }
                    Err(e) => {
                        log(format!("resync: {e}"));
                        std::thread::sleep(TICK);
                    }
                }
                continue;
            };
            match current.next_events(TICK) {
                Ok(events) if events.is_empty() => {}
                Ok(events) => {
                    if let Err(e) = self.apply(events) {
                        log(format!("applying peer changes: {e}; resyncing"));
                        watch = None;
                    }
                }
                Err(e) => {
                    log(format!("watch: {e}; resyncing"));
                    watch = None;
                }
            }
        }
    }
}
