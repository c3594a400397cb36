//! One run at one size: the cold start, the steady state, then joins one after another.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cni_testkit::etcd::EtcdCluster;

use super::agent::{Agent, AgentSettings, DEVICE};
use super::etcd_load::EtcdCounters;
use super::observe::{Peer, Programmed};
use super::topology::{Topology, PREFIX};
use super::{Error, Result};

/// Pause between two observation rounds (a round itself dumps every node waited on).
const ROUND_PAUSE: Duration = Duration::from_millis(10);

/// How often one node's agent may exit (and be started again) before the run fails.
const MAX_RESTARTS: usize = 5;

/// The pause before an exited agent is started again (systemd's `RestartSec` default).
const RESTART_PAUSE: Duration = Duration::from_millis(100);

/// How one run is made.
pub struct Options<'a> {
    pub nodes: usize,
    /// How many leave-and-join cycles are measured.
    pub joins: usize,
    /// How long the converged cluster is left alone to measure its steady load.
    pub steady: Duration,
    /// The agents' lease TTL (they renew three times per TTL).
    pub ttl: u64,
    pub agent_binary: PathBuf,
    /// The longest any one phase may take before the run fails.
    pub limit: Duration,
    /// Set by Ctrl-C/SIGTERM: the run stops at its next check and cleans up.
    pub stop: &'a AtomicBool,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub nodes: usize,
    /// From the first agent's start until every node held exactly its peers' entries.
    pub cold_start: Duration,
    /// From a joining agent's start until every other node held its entries.
    pub joins: Vec<Duration>,
    /// From a joining agent's start until the first other node held its entries: the
    /// rest of a join is the peers' turns on the machine's shared CPUs.
    pub first_peers: Vec<Duration>,
    /// From a leaving agent's SIGTERM until no other node held any of its entries.
    pub leaves: Vec<Duration>,
    /// etcd requests per agent per second, the converged cluster left alone.
    pub steady_requests: f64,
    /// Of those, lease keep-alives.
    pub steady_keepalives: f64,
    /// etcd requests (by every agent) per join besides the keep-alives that go on at the
    /// steady rate, from the joiner's start until every peer had it, and the watch
    /// messages etcd sent meanwhile.
    pub join_requests: f64,
    pub join_watch_messages: f64,
    /// The CPU time the agents already running used for one join (mean over the joins):
    /// each peer's reconcile of the new record.
    pub join_cpu: Duration,
    /// etcd requests per agent from the first start until the cluster converged.
    pub cold_start_requests: f64,
    /// The agents' CPU time per second in the steady state (mean over the agents).
    pub steady_cpu: Duration,
    /// Agents' resident memory after the steady state, KiB.
    pub rss_mean_kib: u64,
    pub rss_max_kib: u64,
    /// Agents that exited (their start failed) and were started again, over the run.
    pub restarts: usize,
    /// The mean duration of one observation round over every node (the resolution of
    /// the cold-start figure).
    pub round: Duration,
    /// The machine's 1-minute load average at the start and the end.
    pub load: (f64, f64),
}

impl Report {
    pub fn join_percentile(&self, percent: usize) -> Duration {
        percentile(&self.joins, percent)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
        serde_json::json!({
            "nodes": self.nodes,
            "cold_start_ms": ms(self.cold_start),
            "join_ms": self.joins.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "join_p50_ms": ms(self.join_percentile(50)),
            "join_max_ms": ms(self.join_percentile(100)),
            "first_peer_ms": self.first_peers.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "first_peer_p50_ms": ms(percentile(&self.first_peers, 50)),
            "leave_ms": self.leaves.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "steady_requests_per_agent_s": self.steady_requests,
            "steady_keepalives_per_agent_s": self.steady_keepalives,
            "join_requests": self.join_requests,
            "join_watch_messages": self.join_watch_messages,
            "join_cpu_ms_all_peers": ms(self.join_cpu),
            "cold_start_requests_per_agent": self.cold_start_requests,
            "steady_cpu_ms_per_agent_s": ms(self.steady_cpu),
            "rss_mean_kib": self.rss_mean_kib,
            "rss_max_kib": self.rss_max_kib,
            "agent_restarts": self.restarts,
            "observation_round_ms": ms(self.round),
            "load_average": [self.load.0, self.load.1],
        })
    }
}

/// The `percent`th percentile (nearest rank) of `samples`; zero when there are none.
pub fn percentile(samples: &[Duration], percent: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        n => sorted[((n * percent).div_ceil(100)).clamp(1, n) - 1],
    }
}

fn load_average() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(0.0)
}

/// The simulated cluster. Field order is drop order: the agents die before the
/// namespaces they program go, etcd and the directory last.
struct Cluster<'a> {
    agents: Vec<Option<Agent>>,
    topology: Topology,
    /// Held for its `Drop`: the member is killed and its data removed.
    _etcd: EtcdCluster,
    endpoint: String,
    /// Held for its `Drop`: the nodes' directories (logs, subnet files) go.
    _dir: tempfile::TempDir,
    options: &'a Options<'a>,
    /// How often each node's agent exited and was started again.
    restarts: Vec<usize>,
    /// Observation rounds over the nodes: count and total time.
    rounds: (u32, Duration),
}

/// Builds the cluster, measures it and tears it all down (also on failure).
pub fn run(options: &Options) -> Result<Report> {
    cni_testkit::ns::require_root();
    let load_before = load_average();
    let dir = tempfile::Builder::new().prefix(&format!("{PREFIX}-scale-")).tempdir()?;
    let etcd = EtcdCluster::start(PREFIX, 1);
    let endpoint = etcd.endpoints()[0].clone();
    let topology = Topology::build(options.nodes, dir.path())?;
    let agents = (0..options.nodes).map(|_| None).collect();
    let mut cluster = Cluster {
        agents,
        topology,
        _etcd: etcd,
        endpoint,
        _dir: dir,
        options,
        restarts: vec![0; options.nodes],
        rounds: (0, Duration::ZERO),
    };

    let cold = EtcdCounters::scrape(&cluster.endpoint)?;
    let cold_start = cluster.cold_start()?;
    let converged = EtcdCounters::scrape(&cluster.endpoint)?;
    let cpu_before = cluster.cpu_time()?;
    cluster.sleep(options.steady)?;
    let steady = EtcdCounters::scrape(&cluster.endpoint)?;
    let cpu_used = cluster.cpu_time()? - cpu_before;
    let seconds = steady.at.duration_since(converged.at).as_secs_f64();
    let per_agent = |delta: f64| delta / seconds / options.nodes as f64;
    let (rss_mean_kib, rss_max_kib) = cluster.rss()?;

    let (mut joins, mut first_peers, mut leaves) = (Vec::new(), Vec::new(), Vec::new());
    let (mut join_requests, mut join_watch, mut join_cpu) = (0.0, 0.0, Duration::ZERO);
    for sample in 0..options.joins {
        // Spread over the nodes: early, middle and late indexes leave and come back.
        let node = (sample * 7 + options.nodes / 2) % options.nodes;
        leaves.push(cluster.leave(node)?);
        let before = EtcdCounters::scrape(&cluster.endpoint)?;
        // Taken before the joiner exists: its own start is not a peer's work.
        let peers_cpu = cluster.cpu_time()?;
        let (first, took) = cluster.join(node)?;
        let after = EtcdCounters::scrape(&cluster.endpoint)?;
        join_cpu += cluster.cpu_time_except(node)? - peers_cpu;
        joins.push(took);
        first_peers.push(first);
        join_requests += after.besides_keepalives() - before.besides_keepalives();
        join_watch += after.watch_messages - before.watch_messages;
    }
    let samples = options.joins.max(1) as f64;
    Ok(Report {
        nodes: options.nodes,
        cold_start,
        joins,
        first_peers,
        leaves,
        steady_requests: per_agent(steady.requests - converged.requests),
        steady_keepalives: per_agent(steady.keepalives - converged.keepalives),
        cold_start_requests: (converged.requests - cold.requests) / options.nodes as f64,
        steady_cpu: cpu_used.div_f64(seconds * options.nodes as f64),
        join_requests: join_requests / samples,
        join_watch_messages: join_watch / samples,
        join_cpu: join_cpu.div_f64(samples),
        rss_mean_kib,
        rss_max_kib,
        restarts: cluster.restarts.iter().sum(),
        round: cluster.rounds.1 / cluster.rounds.0.max(1),
        load: (load_before, load_average()),
    })
}

impl Cluster<'_> {
    fn start_agent(&mut self, node: usize) -> Result<()> {
        let settings = AgentSettings {
            binary: &self.options.agent_binary,
            endpoint: &self.endpoint,
            ttl: self.options.ttl,
        };
        self.agents[node] = Some(Agent::spawn(&settings, &self.topology.nodes[node])?);
        Ok(())
    }

    /// Fails when asked to stop. An agent that exited is started again, as its supervisor
    /// would (systemd's `Restart=always`, which docs/multi-host.md tells operators to
    /// use): the agent exits when its start fails, e.g. when etcd answers none of its
    /// first requests within its 2 s timeout, as a single member flooded by a cold start
    /// on a loaded machine may not. Restarts are counted in the report; past
    /// [`MAX_RESTARTS`] for one node the run fails with the end of its log.
    fn check(&mut self) -> Result<()> {
        if self.options.stop.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        let exited: Vec<usize> =
            (0..self.agents.len()).filter(|&i| self.agents[i].as_mut().is_some_and(Agent::exited)).collect();
        for i in exited {
            self.restarts[i] += 1;
            if self.restarts[i] > MAX_RESTARTS {
                let node = &self.topology.nodes[i];
                let log = std::fs::read_to_string(node.log_file()).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(Error::Setup(format!(
                    "agent of {} exited {} times: {}",
                    node.name,
                    self.restarts[i],
                    tail.join(" | ")
                )));
            }
            std::thread::sleep(RESTART_PAUSE);
            self.start_agent(i)?;
        }
        Ok(())
    }

    /// Sleeps `duration` in short slices, so an interrupt is seen within a fraction of a
    /// second.
    fn sleep(&mut self, duration: Duration) -> Result<()> {
        let end = Instant::now() + duration;
        while Instant::now() < end {
            self.check()?;
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
        }
        Ok(())
    }

    /// Repeats `round` (over the nodes still waited on) until it says every one is done,
    /// or fails after the options' limit naming `what`.
    fn until(&mut self, what: &str, mut round: impl FnMut(&mut Self) -> Result<bool>) -> Result<()> {
        let deadline = Instant::now() + self.options.limit;
        loop {
            self.check()?;
            let started = Instant::now();
            let done = round(self)?;
            self.rounds.0 += 1;
            self.rounds.1 += started.elapsed();
            if done {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!("{what} after {:?}", self.options.limit)));
            }
            std::thread::sleep(ROUND_PAUSE);
        }
    }

    /// Node `i` as its peers must see it (once its agent wrote its subnet file).
    fn peer(&self, i: usize) -> Option<Peer> {
        let node = &self.topology.nodes[i];
        Some(Peer { subnet: node.subnet()?, underlay: node.underlay })
    }

    fn dump(&mut self, i: usize) -> Result<Programmed> {
        Programmed::dump(&mut self.topology.nodes[i].netlink)
    }

    /// Every agent started at once; returns the time until every node held exactly its
    /// peers' entries.
    fn cold_start(&mut self) -> Result<Duration> {
        let started = Instant::now();
        for i in 0..self.options.nodes {
            self.start_agent(i)?;
        }
        let mut peers: Vec<Option<Peer>> = vec![None; self.options.nodes];
        let mut waiting: Vec<usize> = (0..self.options.nodes).collect();
        let mut converged_at = started;
        self.until("cold start: every node with exactly its peers' entries", |cluster| {
            for (i, peer) in peers.iter_mut().enumerate().filter(|(_, p)| p.is_none()) {
                *peer = cluster.peer(i);
            }
            let Some(known) = peers.iter().copied().collect::<Option<Vec<Peer>>>() else {
                return Ok(false);
            };
            let mut still = Vec::new();
            for &i in &waiting {
                let others: Vec<Peer> = (0..known.len()).filter(|&j| j != i).map(|j| known[j]).collect();
                if cluster.dump(i)?.is_exactly(&others) {
                    converged_at = Instant::now();
                } else {
                    still.push(i);
                }
            }
            waiting = still;
            Ok(waiting.is_empty())
        })?;
        Ok(converged_at - started)
    }

    /// Stops node `i`'s agent (SIGTERM: it revokes its lease) and waits until no other
    /// node holds any of its entries; then removes what would not be on a new machine
    /// (its subnet file and VXLAN device), so it comes back as a new node.
    fn leave(&mut self, i: usize) -> Result<Duration> {
        let peer = self.peer(i).ok_or_else(|| Error::Setup(format!("node {i} has no subnet")))?;
        let agent = self.agents[i].take().expect("a running agent");
        let started = Instant::now();
        agent.stop(self.options.limit)?;
        let mut waiting: Vec<usize> = (0..self.options.nodes).filter(|&j| j != i).collect();
        let mut gone_at = started;
        self.until("leave: no node with the left node's entries", |cluster| {
            let mut still = Vec::new();
            for &j in &waiting {
                if cluster.dump(j)?.has_none_of(&peer) {
                    gone_at = Instant::now();
                } else {
                    still.push(j);
                }
            }
            waiting = still;
            Ok(waiting.is_empty())
        })?;
        let node = &mut self.topology.nodes[i];
        std::fs::remove_file(node.subnet_file())?;
        node.netlink.delete_link_by_name(DEVICE)?;
        Ok(gone_at - started)
    }

    /// Starts node `i`'s agent afresh; returns the times until the first and until every
    /// other node held its three entries. The run also waits until the joiner holds all of its peers', so
    /// the next sample starts from a converged cluster.
    fn join(&mut self, i: usize) -> Result<(Duration, Duration)> {
        let started = Instant::now();
        self.start_agent(i)?;
        let mut joiner: Option<Peer> = None;
        let mut waiting: Vec<usize> = (0..self.options.nodes).filter(|&j| j != i).collect();
        let (mut first_at, mut seen_at) = (None, started);
        self.until("join: every node with the joiner's entries", |cluster| {
            let Some(peer) = joiner.or_else(|| cluster.peer(i)) else {
                return Ok(false);
            };
            joiner = Some(peer);
            let mut still = Vec::new();
            for &j in &waiting {
                if cluster.dump(j)?.has(&peer) {
                    seen_at = Instant::now();
                    first_at.get_or_insert(seen_at);
                } else {
                    still.push(j);
                }
            }
            waiting = still;
            Ok(waiting.is_empty())
        })?;
        let others: Vec<Peer> =
            (0..self.options.nodes).filter(|&j| j != i).filter_map(|j| self.peer(j)).collect();
        self.until("join: the joiner with exactly its peers' entries", |cluster| {
            Ok(cluster.dump(i)?.is_exactly(&others))
        })?;
        Ok((first_at.unwrap_or(seen_at) - started, seen_at - started))
    }

    /// The CPU time all running agents used so far.
    fn cpu_time(&self) -> Result<Duration> {
        self.cpu_time_except(usize::MAX)
    }

    /// The CPU time every running agent but node `except`'s used so far.
    fn cpu_time_except(&self, except: usize) -> Result<Duration> {
        let running = self.agents.iter().enumerate().filter(|(i, a)| *i != except && a.is_some());
        let times: Vec<Option<Duration>> =
            running.map(|(_, a)| a.as_ref().and_then(Agent::cpu_time)).collect();
        times
            .iter()
            .copied()
            .sum::<Option<Duration>>()
            .ok_or_else(|| Error::Setup("an agent's CPU time is unreadable".into()))
    }

    /// Mean and largest resident memory of the agents, KiB.
    fn rss(&self) -> Result<(u64, u64)> {
        let rss: Vec<u64> = self.agents.iter().flatten().filter_map(Agent::rss_kib).collect();
        if rss.len() != self.options.nodes {
            return Err(Error::Setup(format!("RSS of {} agents out of {}", rss.len(), self.options.nodes)));
        }
        Ok((rss.iter().sum::<u64>() / rss.len() as u64, rss.iter().copied().max().unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: &[u64]| v.iter().map(|&m| Duration::from_millis(m)).collect::<Vec<_>>();
        let samples = ms(&[40, 10, 30, 20, 50]);
        assert_eq!(percentile(&samples, 50), Duration::from_millis(30));
        assert_eq!(percentile(&samples, 100), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 0), Duration::from_millis(10));
        assert_eq!(percentile(&ms(&[7, 9]), 50), Duration::from_millis(7));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}
