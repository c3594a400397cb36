//! etcd-ipam-bench: N concurrent "nodes" allocate addresses with etcd-ipam against a real
//! etcd cluster started on 127.0.0.1, then again while a member (`--kill`: the leader, a
//! follower, or none) is killed half-way through. Prints the allocations per second of
//! each phase and of the whole run, ADD latencies, CPU time per ADD by role, the failed
//! ADDs, and the duplicates found (in the results and in etcd's own state, which must hold
//! exactly the successful ADDs: a failed one allocates nothing).
//!
//! ```text
//! etcd-ipam-bench [--nodes 8] [--per-node 200] [--members 3] [--mode plugin|agent|library]
//!                 [--kill leader|follower|none] [--parallel 1] [--tls] [--data-base /dev/shm]
//!                 [--plugin-bin PATH]
//! ```
//! `--tls` starts the members with client-certificate TLS and configures `https://`
//! endpoints with `caFile`, `certFile` and `keyFile` (the cost of the handshakes).
//! `--parallel N` runs N ADDs of each node at once (a runtime starting several pods): the
//! agent, and the library mode's shared allocator, then combine them into transactions.
//! `plugin` (the default) runs the real plugin binary once per ADD, as a runtime does: a
//! process start, a new TCP connection and the etcd transactions each time. `agent` runs
//! one `etcd-ipam agent` per node and the plugin binary per ADD talks to it over its unix
//! socket. `library` calls the allocator in-process on one kept-alive connection per node:
//! the agent without the process start and the socket.
//!
//! etcd's data goes under `--data-base` (default /dev/shm: on tmpfs the members' fsyncs
//! cost nothing, and the header says so); a directory on a disk includes them.

mod agents;
mod etcd_load;

use std::collections::HashSet;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agents::Agents;
use cni_bench::measure::{cpu, process};
use etcd_load::EtcdLoad;

use clap::{Parser, ValueEnum};
use cni_etcd_ipam::allocator::Allocator;
use cni_etcd_ipam::batch::Batcher;
use cni_etcd_ipam::block::Block;
use cni_etcd_ipam::config::EtcdIpamConf;
use cni_testkit::etcd::{EtcdCluster, Pki};
use serde_json::json;

/// Allocations per second of etcd-ipam from concurrent nodes against a real etcd cluster
/// on 127.0.0.1, with one member killed half-way through the second phase.
#[derive(Parser, Clone)]
#[command(name = "etcd-ipam-bench", version)]
struct Options {
    /// Nodes allocating at once (each its own agent in `--mode agent`).
    #[arg(long, default_value_t = 8)]
    nodes: usize,
    /// ADDs per node in each of the two phases: the run's length.
    #[arg(long, default_value_t = 200)]
    per_node: usize,
    /// ADDs of each node at once (a runtime starting several pods).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    parallel: u16,
    /// Client-certificate TLS between the plugins (or agents) and etcd.
    #[arg(long)]
    tls: bool,
    /// A TLS cluster's certificates, once it runs.
    #[arg(skip)]
    pki: Option<Pki>,
    /// etcd members (at least 2: one is killed in the second phase).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..))]
    members: u16,
    /// How the ADDs reach etcd.
    #[arg(long, value_enum, default_value_t = Mode::Plugin)]
    mode: Mode,
    /// Which member the second phase loses half-way through.
    #[arg(long, value_enum, default_value_t = Kill::Leader)]
    kill: Kill,
    /// Where the members keep their data (tmpfs: their fsyncs cost nothing).
    #[arg(long, default_value = "/dev/shm")]
    data_base: PathBuf,
    /// The `etcd-ipam` binary (the plugin, and the agent as its `agent` sub-command);
    /// default: next to this program.
    #[arg(long)]
    plugin_bin: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Mode {
    /// The plugin binary per ADD, straight to etcd.
    Plugin,
    /// The plugin binary per ADD, through one `etcd-ipam agent` per node.
    Agent,
    /// The allocator in-process, one connection per node.
    Library,
}

/// The member killed mid-run in the second phase.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Kill {
    /// The leader: writes stall until a new one is elected.
    Leader,
    /// A follower: connections to it are reset, the leader goes on.
    Follower,
    /// None: the second phase runs with every member up.
    None,
}

impl Options {
    fn plugin_bin(&self) -> PathBuf {
        self.plugin_bin.clone().unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.with_file_name("etcd-ipam")
        })
    }

    fn parallel(&self) -> usize {
        usize::from(self.parallel)
    }
}

fn network_conf(
    endpoints: &[String],
    node: &str,
    agent_socket: Option<&PathBuf>,
    pki: Option<&Pki>,
) -> serde_json::Value {
    let mut conf = json!({
        "cniVersion": "1.1.0",
        "name": "edbench",
        "type": "etcd-ipam",
        "ipam": {"type": "etcd-ipam", "endpoints": endpoints, "pools": ["10.200.0.0/14"], "nodeName": node}
    });
    if let Some(socket) = agent_socket {
        conf["ipam"]["agentSocket"] = socket.display().to_string().into();
    }
    if let Some(pki) = pki {
        conf["ipam"]["caFile"] = pki.ca.display().to_string().into();
        conf["ipam"]["certFile"] = pki.client_cert.display().to_string().into();
        conf["ipam"]["keyFile"] = pki.client_key.display().to_string().into();
    }
    conf
}

/// One ADD through the plugin binary; the address it returned.
fn add_by_plugin(bin: &Path, conf: &[u8], container_id: &str) -> Result<IpAddr, String> {
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_NETNS", "/var/run/netns/edbench")
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    child.stdin.take().expect("piped").write_all(conf).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {out:?}"))?;
    match result["ips"][0]["address"].as_str() {
        Some(cidr) if out.status.success() => {
            Ok(cidr.parse::<ipnet::IpNet>().map_err(|e| e.to_string())?.addr())
        }
        _ => Err(format!("ADD failed: {result}")),
    }
}

/// One ADD's outcome: the address (or why it failed), how long it took, and when it
/// finished.
type Outcome = (Result<IpAddr, String>, Duration, Instant);

/// What every node's ADDs need to know about the run.
struct Run<'a> {
    options: &'a Options,
    endpoints: &'a [String],
    agents: Option<&'a Agents>,
    phase: &'a str,
    /// ADDs finished so far in this phase, all nodes together.
    done: &'a AtomicUsize,
}

/// One node's run: `per_node` ADDs, `parallel` at a time. A failed ADD is recorded and the
/// node goes on (a runtime would retry it; what matters here is that it allocated nothing).
fn run_node(run: &Run, node: usize) -> Result<Vec<Outcome>, String> {
    let options = run.options;
    let name = format!("node-{node}");
    let socket = run.agents.map(|agents| agents.socket(node));
    let conf = network_conf(run.endpoints, &name, socket.as_ref(), options.pki.as_ref());
    let bytes = conf.to_string().into_bytes();
    let batcher = if options.mode == Mode::Library {
        let parsed = EtcdIpamConf::parse(&bytes).map_err(|e| e.to_string())?;
        let mut client = parsed.client().map_err(|e| e.to_string())?;
        client.prefer(node);
        Some(Batcher::new(Allocator::new(parsed, client)))
    } else {
        None
    };
    let phase = run.phase;
    let plugin_bin = options.plugin_bin();
    let one_add = |i: usize| -> Outcome {
        let start = Instant::now();
        let ip = match &batcher {
            Some(batcher) => batcher
                .allocate(&format!("{phase}-{node}-{i}/eth0"))
                .map(|allocation| allocation.address.addr())
                .map_err(|e| e.to_string()),
            None => add_by_plugin(&plugin_bin, &bytes, &format!("{phase}-{node}-{i}")),
        };
        run.done.fetch_add(1, Ordering::Relaxed);
        (ip, start.elapsed(), Instant::now())
    };
    let parallel = options.parallel();
    Ok(std::thread::scope(|scope| {
        let threads: Vec<_> = (0..parallel)
            .map(|w| {
                let one_add = &one_add;
                scope.spawn(move || (w..options.per_node).step_by(parallel).map(one_add).collect::<Vec<_>>())
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().expect("worker thread")).collect()
    }))
}

struct Phase {
    addresses: Vec<IpAddr>,
    failures: Vec<String>,
    elapsed: Duration,
    /// The successful ADDs' latencies, sorted.
    latencies: Vec<Duration>,
    /// When each ADD (successful or not) finished, from the phase's start, sorted.
    finished: Vec<Duration>,
    /// When the member was killed, from the phase's start.
    killed_at: Option<Duration>,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.addresses.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn latency(&self, quantile: f64) -> Duration {
        let last = self.latencies.len().saturating_sub(1);
        self.latencies.get((last as f64 * quantile) as usize).copied().unwrap_or_default()
    }

    /// Both phases as one run (the figure sustained over the member's loss).
    fn then(&self, next: &Phase) -> Phase {
        let mut latencies: Vec<Duration> = self.latencies.iter().chain(&next.latencies).copied().collect();
        latencies.sort();
        Phase {
            addresses: self.addresses.iter().chain(&next.addresses).copied().collect(),
            failures: self.failures.iter().chain(&next.failures).cloned().collect(),
            elapsed: self.elapsed + next.elapsed,
            latencies,
            finished: Vec::new(),
            killed_at: None,
        }
    }
}

/// Runs every node's ADDs; `mid_run` is called (on a thread of its own) once half of them
/// have finished, while the others are in flight.
fn run_phase(
    options: &Options,
    endpoints: &[String],
    agents: Option<&Agents>,
    phase: &str,
    mid_run: Option<Box<dyn FnOnce() + Send + '_>>,
) -> Result<Phase, String> {
    let done = AtomicUsize::new(0);
    let run = Run { options, endpoints, agents, phase, done: &done };
    let half = options.nodes * options.per_node / 2;
    let start = Instant::now();
    let killed_at = std::sync::Mutex::new(None);
    let per_node: Vec<Result<Vec<Outcome>, String>> = std::thread::scope(|scope| {
        if let Some(mid_run) = mid_run {
            let (done, killed_at) = (&done, &killed_at);
            scope.spawn(move || {
                while done.load(Ordering::Relaxed) < half {
                    std::thread::sleep(Duration::from_millis(1));
                }
                *killed_at.lock().expect("not poisoned") = Some(start.elapsed());
                mid_run()
            });
        }
        let run = &run;
        let threads: Vec<_> = (0..options.nodes).map(|n| scope.spawn(move || run_node(run, n))).collect();
        threads.into_iter().map(|t| t.join().expect("node thread")).collect()
    });
    let elapsed = start.elapsed();
    let (mut addresses, mut failures, mut latencies, mut finished) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let outcomes = per_node.into_iter().collect::<Result<Vec<_>, _>>()?;
    for (result, latency, end) in outcomes.into_iter().flatten() {
        finished.push(end.duration_since(start));
        match result {
            Ok(ip) => {
                addresses.push(ip);
                latencies.push(latency);
            }
            Err(e) => failures.push(e),
        }
    }
    latencies.sort();
    finished.sort();
    let killed_at = killed_at.into_inner().expect("not poisoned");
    Ok(Phase { addresses, failures, elapsed, latencies, finished, killed_at })
}

fn report(name: &str, phase: &Phase) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:<28} {:>6} ADDs  {:>8.0} allocations/s  latency ms: median {:.2} p90 {:.2} p99 {:.2} max {:.2}  failed {}",
        phase.addresses.len(),
        phase.rate(),
        ms(phase.latency(0.5)),
        ms(phase.latency(0.9)),
        ms(phase.latency(0.99)),
        ms(phase.latency(1.0)),
        phase.failures.len(),
    );
    if let Some(first) = phase.failures.first() {
        println!("  first failure: {first}");
    }
    if !phase.finished.is_empty() {
        println!("  {}", timeline(phase));
    }
}

/// ADDs finished in each second of the phase, and its longest stretch without one (the
/// stall a member's loss causes), placed against the moment of the kill.
fn timeline(phase: &Phase) -> String {
    let mut per_second = vec![0usize; phase.elapsed.as_secs() as usize + 1];
    for end in &phase.finished {
        per_second[end.as_secs() as usize] += 1;
    }
    let per_second: Vec<String> = per_second.iter().map(ToString::to_string).collect();
    let (gap, gap_start) =
        phase.finished.windows(2).map(|pair| (pair[1] - pair[0], pair[0])).max().unwrap_or_default();
    let killed = match phase.killed_at {
        Some(at) => format!(", member killed at {:.2} s", at.as_secs_f64()),
        None => String::new(),
    };
    format!(
        "finished per second: {}; longest stretch without one: {:.0} ms from {:.2} s{killed}",
        per_second.join(" "),
        gap.as_secs_f64() * 1e3,
        gap_start.as_secs_f64(),
    )
}

fn describe(options: &Options) -> String {
    let data = &options.data_base;
    let fsync = if data.starts_with("/dev/shm") {
        "tmpfs: the members' fsyncs cost nothing"
    } else {
        "the members fsync to it"
    };
    let mode = match options.mode {
        Mode::Plugin => "plugin (one process per ADD, straight to etcd)",
        Mode::Agent => "agent (one process per ADD, through its node's agent)",
        Mode::Library => "library (in-process, one connection per node)",
    };
    format!(
        "etcd-ipam-bench: {} nodes x {} ADDs ({} at a time), {} etcd members{}, data under {} ({fsync}), mode {mode}",
        options.nodes,
        options.per_node,
        options.parallel,
        options.members,
        if options.tls { " over TLS" } else { "" },
        data.display(),
    )
}

/// Checks the results against each other and against etcd's own state: every address
/// once, and etcd holding a handle and a block entry for each successful ADD, nothing for
/// a failed one.
fn check_etcd(cluster: &EtcdCluster, run: &Phase) -> Result<(), String> {
    let all = &run.addresses;
    let unique: HashSet<&IpAddr> = all.iter().collect();
    let mut client = cluster.client();
    let (handles, _) = client.get_prefix(b"/cni-rs/ipam/edbench/handle/", true).map_err(|e| e.to_string())?;
    let (blocks, _) = client.get_prefix(b"/cni-rs/ipam/edbench/block/", false).map_err(|e| e.to_string())?;
    let mut in_blocks = HashSet::new();
    let mut block_entries = 0;
    for kv in &blocks {
        let block = Block::from_json(&kv.value).ok_or("a block in etcd is not valid")?;
        for offset in block.allocations.keys() {
            block_entries += 1;
            in_blocks.insert(block.address(*offset));
        }
    }
    let duplicates = all.len() - unique.len();
    println!(
        "duplicates: {duplicates} in results; etcd holds {} handles, {} block entries, {} distinct addresses, {} blocks",
        handles.len(),
        block_entries,
        in_blocks.len(),
        blocks.len()
    );
    let agrees = in_blocks.iter().all(|ip| unique.contains(ip));
    if duplicates != 0
        || handles.len() != all.len()
        || in_blocks.len() != all.len()
        || block_entries != all.len()
        || !agrees
    {
        return Err("the allocations are not unique, or etcd disagrees with the results".into());
    }
    Ok(())
}

/// etcd's current revision, moved on by one write (`etcd-ipam-bench` marks): each write
/// makes one revision, so the difference of two is the writes between them, plus one.
fn etcd_revision(cluster: &EtcdCluster) -> Result<i64, String> {
    cluster.client().put(b"/edbench-mark", b"", 0).map_err(|e| e.to_string())
}

fn run(options: &Options) -> Result<(), String> {
    let plugin_bin = options.plugin_bin();
    if options.mode != Mode::Library && !plugin_bin.exists() {
        return Err(format!("{} not found (build cni-etcd-ipam, or --plugin-bin)", plugin_bin.display()));
    }
    let members = usize::from(options.members);
    let mut cluster = if options.tls {
        EtcdCluster::start_tls_in(&options.data_base, "edbench", members)
    } else {
        EtcdCluster::start_in(&options.data_base, "edbench", members)
    };
    let options = &Options { pki: cluster.pki().cloned(), ..options.clone() };
    let endpoints = cluster.endpoints();
    let agents =
        if options.mode == Mode::Agent { Some(Agents::start(&plugin_bin, options.nodes)?) } else { None };
    let agents = agents.as_ref();
    println!("{}", describe(options));
    let agent_pids = agents.map(Agents::pids).unwrap_or_default();
    let before = (cpu::Sample::take(&agent_pids, &cluster.pids()), etcd_revision(&cluster)?);
    let load_before = EtcdLoad::scrape(&endpoints);
    let healthy = run_phase(options, &endpoints, agents, "healthy", None)?;
    let load_after = EtcdLoad::scrape(&endpoints);
    let after = (cpu::Sample::take(&agent_pids, &cluster.pids()), etcd_revision(&cluster)?);
    report("all members up", &healthy);
    let adds = healthy.addresses.len() + healthy.failures.len();
    println!("  {}", before.0.per_add(&after.0, adds));
    // Every write (transaction or put) makes one revision: ADDs per write is the batching.
    let writes = after.1 - before.1 - 1;
    println!("  etcd writes: {writes} ({:.2} ADDs per write)", adds as f64 / writes.max(1) as f64);
    if let (Some(before), Some(after)) = (&load_before, &load_after) {
        println!("  {}", before.per_add(after, adds));
    }
    let killed = std::sync::Mutex::new(None);
    let kill = options.kill;
    let kill_member = Box::new(|| {
        let leader = cluster.leader().unwrap_or(0);
        let victim = match kill {
            Kill::Leader => leader,
            Kill::Follower => (leader + 1) % members,
            Kill::None => return,
        };
        // No member is down yet: the pids are in member order.
        let pid = cluster.pids()[victim];
        let spent = process::cpu_time(pid).unwrap_or_default();
        cluster.kill(victim);
        *killed.lock().expect("not poisoned") = Some((victim, pid, spent));
    });
    let degraded = run_phase(options, &endpoints, agents, "degraded", Some(kill_member))?;
    let mut end = cpu::Sample::take(&agent_pids, &cluster.pids());
    let killed = killed.into_inner().expect("not poisoned");
    if let Some((_, pid, spent)) = killed {
        end = end.with_reaped_member(pid, spent);
    }
    let second = match (kill, killed.map(|(member, _, _)| member)) {
        (Kill::None, _) => "second phase, all up".to_string(),
        (_, None) => return Err("the member was never killed".into()),
        (Kill::Leader, Some(member)) => format!("leader (member {member}) killed"),
        (Kill::Follower, Some(member)) => format!("follower (member {member}) killed"),
    };
    report(&second, &degraded);
    let second_adds = degraded.addresses.len() + degraded.failures.len();
    println!("  {}", after.0.per_add(&end, second_adds));
    let whole = healthy.then(&degraded);
    report("whole run", &whole);
    println!("  {}", before.0.per_add(&end, adds + second_adds));
    check_etcd(&cluster, &whole)
}

fn main() -> ExitCode {
    let options: Options = cni_cli::parse();
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-ipam-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
