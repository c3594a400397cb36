//! The agent's life: acquire (or re-adopt) the subnet, set up the device, then keep the
//! lease alive and the peers' entries in step with etcd until asked to stop.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cni_etcd::{Client, Event, Watch};
use cni_net::{NetNs, Netlink};
use ipnet::Ipv4Net;

use crate::config::Config;
use crate::dataplane::{self, Device, Underlay};
use crate::lease::{self, NodeRecord, SubnetLease};
use crate::{cniconf, Result};

/// How long one wait on the watch lasts: the stop flag and the keep-alive are looked at
/// between two waits.
const TICK: Duration = Duration::from_millis(250);

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
    peers: BTreeMap<Ipv4Net, NodeRecord>,
}

/// Runs until `stop` is set (by SIGTERM/SIGINT); errors only when the start fails.
pub fn run(config: &Config, stop: &AtomicBool) -> Result<()> {
    let client = Client::new(&config.endpoints, Duration::from_secs(2))?;
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
        peers: BTreeMap::new(),
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

    /// Full range of the records, then the kernel made to match; returns the revision to
    /// watch from.
    fn resync(&mut self) -> Result<i64> {
        let (mut records, revision) = lease::list(&mut self.client, self.config)?;
        records.remove(&self.lease.subnet);
        records.retain(|_, r| r.node != self.config.node);
        self.peers = records;
        dataplane::reconcile(&mut self.nl, &self.device, &self.peers)?;
        Ok(revision)
    }

    /// A resync, then a watch from just after the revision it read: no change is missed
    /// between the two.
    fn resync_and_watch(&mut self) -> Result<Watch> {
        let revision = self.resync()?;
        Ok(self.client.watch_prefix(self.config.subnets_prefix().as_bytes(), revision + 1)?)
    }

    fn apply(&mut self, events: Vec<Event>) -> Result<()> {
        for event in events {
            match event {
                Event::Put(kv) => {
                    let Some(subnet) = lease::key_subnet(self.config, &kv.key) else { continue };
                    match serde_json::from_slice::<NodeRecord>(&kv.value) {
                        Ok(record) if record.node != self.config.node && subnet != self.lease.subnet => {
                            log(format!("peer {} joined with {subnet} at {}", record.node, record.underlay));
                            self.peers.insert(subnet, record);
                        }
                        Ok(_) => {}
                        Err(e) => log(format!("record {}: {e}", kv.key_str())),
                    }
                }
                Event::Delete(kv) => {
                    let Some(subnet) = lease::key_subnet(self.config, &kv.key) else { continue };
                    if let Some(record) = self.peers.remove(&subnet) {
                        log(format!("peer {} left ({subnet})", record.node));
                    }
                }
            }
        }
        dataplane::reconcile(&mut self.nl, &self.device, &self.peers)
    }

    fn keepalive(&mut self) {
        match self.client.lease_keepalive(self.lease.lease_id) {
            Ok(ttl) if ttl > 0 => {}
            Ok(_) => {
                // The lease ran out (etcd unreachable for longer than the TTL): ask for the
                // same subnet again.
                log(format!("lease of {} expired; acquiring again", self.lease.subnet));
                if let Err(e) = self.acquire() {
                    log(format!("acquiring: {e}"));
                }
            }
            Err(e) => log(format!("keep-alive: {e}")),
        }
    }

    fn watch_loop(&mut self, stop: &AtomicBool) {
        let mut watch: Option<Watch> = None;
        let mut next_keepalive = Instant::now() + self.config.keepalive_interval();
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next_keepalive {
                self.keepalive();
                next_keepalive = Instant::now() + self.config.keepalive_interval();
            }
            let Some(current) = watch.as_mut() else {
                match self.resync_and_watch() {
                    Ok(w) => watch = Some(w),
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
