//! The agent's life: acquire (or re-adopt) the subnet, set up the device, then keep the
//! lease alive and the peers' entries in step with etcd until asked to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_cli::tracing;
use cni_etcd::{Client, Event, Tls, Watch};
use cni_net::wireguard::{self, Key, WireGuard};
use cni_net::{NetNs, Netlink};

use crate::config::{Backend, Config};
use crate::dataplane::{self, Device, Underlay};
use crate::lease::{self, paired_subnet6, NodeRecord, SubnetLease};
use crate::metrics::OverlayMetrics;
use crate::peer::{Change, Own, Peers};
use crate::{cniconf, wgkey, wgplane, Error, Result};

/// How long one wait on the watch lasts: the stop flag and the keep-alive are looked at
/// between two waits.
const TICK: Duration = Duration::from_millis(250);

/// How long after a kernel request failed for some peer the peers are programmed again.
const RETRY: Duration = Duration::from_secs(2);

struct Agent<'a> {
    config: &'a Config,
    client: Client,
    nl: Netlink,
    underlay: Underlay,
    record: NodeRecord,
    lease: SubnetLease,
    /// The VXLAN or WireGuard device (none with `--backend direct`).
    device: Option<Device>,
    /// With `--backend wireguard`: the generic-netlink socket and the node's public key.
    wireguard: Option<(WireGuard, Key)>,
    peers: Peers,
    /// When to program the peers again after some kernel request failed.
    retry_at: Option<Instant>,
    /// The failures last logged, so a failure that persists is not logged every retry.
    failures: Vec<String>,
    /// A new underlay address already logged (it takes a restart to publish).
    moved_to: Option<std::net::IpAddr>,
    metrics: Arc<OverlayMetrics>,
}

/// Runs until `stop` is set (by SIGTERM/SIGINT); errors only when the start fails.
pub fn run(config: &Config, stop: &AtomicBool) -> Result<()> {
    let tls = config.tls.as_ref().map(Tls::load).transpose()?;
    let mut client = Client::with_tls(&config.endpoints, Duration::from_secs(2), tls)?;
    let metrics = Arc::new(OverlayMetrics::default());
    client.observe(metrics.observer());
    let health = metrics.health(Duration::from_secs(config.ttl.unsigned_abs()));
    cni_metrics::daemon::serve_metrics(config.metrics_address, |registry| metrics.register(registry), health)
        .map_err(|e| Error::Io("serving metrics".into(), e))?;
    // The namespace is opened once: the netlink socket and the sysctl write stay in it.
    let netns = config.netns.as_ref().map(NetNs::open).transpose()?;
    let mut nl = match &netns {
        Some(ns) => Netlink::in_ns(ns)?,
        None => Netlink::new()?,
    };
    let underlay = dataplane::underlay(&mut nl, &config.iface)?;
    check_backend(config, &underlay)?;
    // Derived from the underlay address: the same across restarts and recreated devices.
    let mac = dataplane::vtep_mac(underlay.address);
    let mut record = NodeRecord {
        node: config.node.clone(),
        underlay: underlay.address,
        vtep_mac: mac.to_string(),
        subnet6: None,
        wg_public_key: None,
        wg_port: None,
    };
    // The WireGuard device exists before the record: the record carries its public key.
    let (device, wireguard) = match config.backend {
        Backend::Wireguard => {
            let (device, wg, public_key) = wireguard_device(config, netns.as_ref(), &mut nl, &underlay)?;
            record.wg_public_key = Some(wireguard::base64(&public_key));
            record.wg_port = Some(config.port);
            (Some(device), Some((wg, public_key)))
        }
        _ => (None, None),
    };
    let mut agent = Agent {
        config,
        client,
        nl,
        underlay,
        record,
        lease: SubnetLease { subnet: config.network, lease_id: 0 },
        device,
        wireguard,
        peers: Peers::default(),
        retry_at: None,
        failures: Vec::new(),
        moved_to: None,
        metrics,
    };
    agent.acquire()?;
    // The node routes between its bridge and the overlay.
    let mut forwarding = vec!["net/ipv4/ip_forward"];
    if config.network6.is_some() {
        forwarding.push("net/ipv6/conf/all/forwarding");
    }
    for key in forwarding {
        match &netns {
            Some(ns) => cni_net::sysctl::write_in(ns, key, "1")?,
            None => cni_net::sysctl::write(key, "1")?,
        }
    }
    agent.watch_loop(stop);
    if config.revoke_on_exit {
        match agent.client.lease_revoke(agent.lease.lease_id) {
            Ok(()) => tracing::info!(subnet = %agent.lease.subnet, "revoked the lease"),
            Err(e) => tracing::warn!(subnet = %agent.lease.subnet, error = %e, "cannot revoke the lease"),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// The node's key (made on first start), the WireGuard device with it, and the public key.
fn wireguard_device(
    config: &Config,
    netns: Option<&NetNs>,
    nl: &mut Netlink,
    underlay: &Underlay,
) -> Result<(Device, WireGuard, Key)> {
    let private_key = wgkey::load_or_create(&config.wg_key_file)?;
    let mut wg = match netns {
        Some(ns) => WireGuard::in_ns(ns)?,
        None => WireGuard::new()?,
    };
    let (device, public_key) = wgplane::ensure_device(nl, &mut wg, config, underlay, &private_key)?;
    tracing::info!(device = %config.device, public_key = %wireguard::base64(&public_key), "WireGuard device up");
    Ok((device, wg, public_key))
}

/// `--backend direct` routes a pod subnet only via a next hop of its own family: every pod
/// network must then be of the underlay's family (the record carries one underlay address).
fn check_backend(config: &Config, underlay: &Underlay) -> Result<()> {
    let families_match = underlay.address.is_ipv4() && config.network6.is_none();
    if config.backend == Backend::Direct && !families_match {
        return Err(Error::Config(format!(
            "--backend direct needs every pod network of the underlay's family ({} on --iface {}); use \
             --backend auto (VXLAN for the other family)",
            underlay.address, config.iface
        )));
    }
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
        let subnet6 = paired_subnet6(self.config, self.lease.subnet);
        if self.config.backend == Backend::Direct {
            dataplane::remove_device(&mut self.nl, self.config)?;
        } else if let Some(device) =
            self.device.as_ref().filter(|_| self.config.backend == Backend::Wireguard)
        {
            dataplane::assign_vteps(&mut self.nl, device.index, self.lease.subnet, subnet6)?;
        } else {
            self.device = Some(dataplane::ensure_device(
                &mut self.nl,
                self.config,
                &self.underlay,
                self.lease.subnet,
                subnet6,
            )?);
        }
        // Without encapsulation the pods get the underlay's whole MTU.
        let mtu = self.device.as_ref().map_or(self.underlay.mtu, |d| d.mtu);
        cniconf::write(self.config, self.lease.subnet, subnet6, mtu)?;
        tracing::info!(
            node = %self.config.node,
            subnet = %self.lease.subnet,
            subnet6 = subnet6.map(tracing::field::display),
            lease = %format_args!("{:x}", self.lease.lease_id),
            backend = %self.config.backend,
            mtu,
            "holding the subnet"
        );
        Ok(())
    }

    fn own(&self) -> Own {
        Own {
            subnet: self.lease.subnet,
            subnet6: paired_subnet6(self.config, self.lease.subnet),
            underlay: self.underlay.address,
            onlink: self.underlay.onlink.clone(),
            wg_public_key: self.wireguard.as_ref().map(|(_, key)| *key),
        }
    }

    fn log_change(change: Change) {
        match change {
            Change::Joined(peer) | Change::Replaced { new: peer, .. } => tracing::info!(
                peer = ?peer.node(),
                subnet = %peer.subnet(),
                subnet6 = peer.subnet6().map(tracing::field::display),
                underlay = %peer.underlay(),
                path = %peer.path(),
                "peer joined"
            ),
            Change::Left(peer) => tracing::info!(peer = ?peer.node(), subnet = %peer.subnet(), "peer left"),
            // The key and the reason quote another node's record: the key is escaped.
            Change::Refused { key, reason, .. } => {
                tracing::warn!(key = ?key, reason = %reason, "refused a node record")
            }
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
        let failures =
            self.program().inspect_err(|_| self.metrics.reconciled(self.peers.accepted().values(), None))?;
        self.metrics.reconciled(self.peers.accepted().values(), Some(failures.len()));
        let failures: Vec<String> = failures.iter().map(ToString::to_string).collect();
        if failures != self.failures {
            for failure in failures.iter().filter(|f| !self.failures.contains(f)) {
                tracing::warn!(failure = %failure, "cannot program a peer; retrying");
            }
            if failures.is_empty() {
                tracing::info!("every peer programmed");
            }
        }
        self.retry_at = (!failures.is_empty()).then(|| Instant::now() + RETRY);
        self.failures = failures;
        Ok(())
    }

    /// One pass over the kernel: the WireGuard peers (with that backend), then the routes,
    /// neighbours and FDB entries.
    fn program(&mut self) -> Result<Vec<dataplane::Failure>> {
        let mut failures = match (&mut self.wireguard, &self.device) {
            (Some((wg, _)), Some(device)) => wgplane::reconcile(wg, device, self.peers.accepted())?,
            _ => Vec::new(),
        };
        failures.extend(dataplane::reconcile(
            &mut self.nl,
            self.config,
            &self.underlay,
            self.device.as_ref(),
            self.peers.accepted(),
        )?);
        Ok(failures)
    }

    /// A resync, then a watch from just after the revision it read: no change is missed
    /// between the two.
    fn resync_and_watch(&mut self) -> Result<Watch> {
        let revision = self.resync()?;
        Ok(self.client.watch_prefix(self.config.subnets_prefix().as_bytes(), revision + 1)?)
    }

    /// The watch's changes, each applied to the kernel on its own: the entries of the one
    /// peer that changed are written or removed, nothing is dumped, so a join costs every
    /// other node the same whatever the cluster's size (a full pass, [`Self::converge`],
    /// runs at start, after a watch gap, on a retry and every [`RECONCILE`] or so).
    fn apply(&mut self, events: Vec<Event>) {
        let own = self.own();
        let mut failures = Vec::new();
        for event in events {
            let change = match event {
                Event::Put(kv) => self.peers.put(self.config, &own, &kv),
                Event::Delete(kv) => self.peers.delete(self.config, &kv.key),
            };
            failures.extend(self.program_change(&change));
            self.metrics.change(&change);
            Self::log_change(change);
        }
        self.metrics.reconciled(self.peers.accepted().values(), Some(failures.len()));
        if !failures.is_empty() && self.retry_at.is_none() {
            for failure in &failures {
                tracing::warn!(failure = %failure, "cannot program a peer; retrying");
            }
            self.retry_at = Some(Instant::now() + RETRY);
        }
    }

    /// The kernel requests one peer's change needs: its old entries out (those its new
    /// record does not keep), its new ones in.
    fn program_change(&mut self, change: &Change) -> Vec<dataplane::Failure> {
        let (old, new) = match change {
            Change::Joined(new) => (None, Some(new)),
            Change::Replaced { old, new } => (Some(old), Some(new)),
            Change::Left(old) | Change::Refused { dropped: Some(old), .. } => (Some(old), None),
            Change::Refused { dropped: None, .. } | Change::Unchanged => return Vec::new(),
        };
        let mut failures = match (&mut self.wireguard, &self.device) {
            (Some((wg, _)), Some(device)) => wgplane::program_change(wg, device, old, new),
            _ => Vec::new(),
        };
        let accepted = self.peers.accepted();
        failures.extend(dataplane::program_change(
            &mut self.nl,
            &self.underlay,
            self.device.as_ref(),
            accepted,
            old,
            new,
        ));
        failures
    }

    /// Renews the lease; true when the subnet had to be acquired again (the peers are then
    /// checked against it afresh).
    fn keepalive(&mut self) -> bool {
        match self.client.lease_keepalive(self.lease.lease_id) {
            Ok(ttl) if ttl > 0 => false,
            Ok(_) => {
                // The lease ran out (etcd unreachable for longer than the TTL): ask for the
                // same subnet again.
                tracing::warn!(subnet = %self.lease.subnet, "the lease expired; acquiring again");
                self.metrics.lease_expired();
                if let Err(e) = self.acquire() {
                    tracing::warn!(error = %e, "cannot acquire the subnet; retrying");
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "lease keep-alive failed; retrying");
                false
            }
        }
    }

    /// Reads the underlay interface's prefixes again; true when they changed, so which
    /// peers are on-link (direct or VXLAN with `--backend auto`, accepted at all with
    /// `direct`) is decided afresh by a resync. A changed underlay address itself is only
    /// logged: the record and the device follow it at the agent's next start.
    fn onlink_changed(&mut self) -> bool {
        if matches!(self.config.backend, Backend::Vxlan | Backend::Wireguard) {
            return false;
        }
        let now = match dataplane::underlay(&mut self.nl, &self.config.iface) {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(iface = %self.config.iface, error = %e, "cannot read --iface");
                return false;
            }
        };
        if now.address != self.underlay.address && self.moved_to != Some(now.address) {
            self.moved_to = Some(now.address);
            tracing::warn!(
                iface = %self.config.iface,
                address = %now.address,
                published = %self.underlay.address,
                "--iface has a new first address: restart the agent to publish it"
            );
        }
        if now.onlink == self.underlay.onlink {
            return false;
        }
        tracing::info!(iface = %self.config.iface, onlink = ?now.onlink, "on-link prefixes of --iface changed; resyncing");
        self.underlay.onlink = now.onlink;
        true
    }

    fn watch_loop(&mut self, stop: &AtomicBool) {
        let mut watch: Option<Watch> = None;
        // Whether a watch ran before: each later resync is a restart.
        let mut watched = false;
        let mut next_keepalive = Instant::now() + self.config.keepalive_interval();
        let mut next_reconcile = Instant::now() + reconcile_interval();
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next_keepalive {
                if self.keepalive() || self.onlink_changed() {
                    watch = None;
                }
                next_keepalive = Instant::now() + self.config.keepalive_interval();
            }
            if Instant::now() >= next_reconcile {
                self.retry_at = Some(Instant::now());
                next_reconcile = Instant::now() + reconcile_interval();
            }
            if self.retry_at.is_some_and(|at| Instant::now() >= at) {
                if let Err(e) = self.converge() {
                    tracing::warn!(error = %e, "programming peers failed; resyncing");
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
                        tracing::warn!(error = %e, "resync failed; retrying");
                        std::thread::sleep(TICK);
                    }
                }
                continue;
            };
            match current.next_events(TICK) {
                Ok(events) if events.is_empty() => {}
                Ok(events) => self.apply(events),
                Err(e) => {
                    tracing::warn!(error = %e, "watch failed; resyncing");
                    watch = None;
                }
            }
        }
    }
}

/// How often a full pass compares the kernel with the believed peers when nothing asked
/// for one: it repairs what another program changed under the agent. Jittered by up to a
/// quarter either way, so that nodes started together do not dump their tables together.
const RECONCILE: Duration = Duration::from_secs(600);

fn reconcile_interval() -> Duration {
    let quarter = RECONCILE / 4;
    let random = cni_os::random::u64().unwrap_or(0);
    let jitter = Duration::from_millis(random % (2 * quarter.as_millis() as u64).max(1));
    RECONCILE - quarter + jitter
}
