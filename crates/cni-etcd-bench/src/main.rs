//! etcd-ipam-bench: N concurrent "nodes" allocate addresses with etcd-ipam against a real
//! etcd cluster started on 127.0.0.1, then again with one member killed. Prints the
//! allocations per second of each phase, ADD latencies, and the duplicates found (in the
//! results and in etcd's own state: there must be none).
//!
//! ```text
//! etcd-ipam-bench [--nodes 8] [--per-node 200] [--members 3] [--mode plugin|agent|library]
//!                 [--parallel 1] [--tls] [--data-base /dev/shm] [--plugin-bin PATH]
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

use std::collections::HashSet;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use cni_etcd_ipam::allocator::Allocator;
use cni_etcd_ipam::batch::Batcher;
use cni_etcd_ipam::block::Block;
use cni_etcd_ipam::config::EtcdIpamConfig;
use cni_etcd_testing::{EtcdCluster, Pki};
use serde_json::json;

#[derive(Clone)]
struct Options {
    nodes: usize,
    per_node: usize,
    parallel: usize,
    tls: bool,
    /// A TLS cluster's certificates, once it runs.
    pki: Option<Pki>,
    members: usize,
    mode: Mode,
    data_base: PathBuf,
    /// The `etcd-ipam` binary (the plugin, and the agent as its `agent` sub-command).
    plugin_bin: PathBuf,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The plugin binary per ADD, straight to etcd.
    Plugin,
    /// The plugin binary per ADD, through one `etcd-ipam agent` per node.
    Agent,
    /// The allocator in-process, one connection per node.
    Library,
}

const USAGE: &str = "usage: etcd-ipam-bench [--nodes N] [--per-node N] [--members N] \
[--mode plugin|agent|library] [--parallel N] [--tls] [--data-base DIR] [--plugin-bin PATH]";

fn parse_options() -> Result<Options, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut options = Options {
        nodes: 8,
        per_node: 200,
        parallel: 1,
        tls: false,
        pki: None,
        members: 3,
        mode: Mode::Plugin,
        data_base: PathBuf::from("/dev/shm"),
        plugin_bin: exe.with_file_name("etcd-ipam"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--nodes" => options.nodes = number(value()?)?,
            "--per-node" => options.per_node = number(value()?)?,
            "--members" => options.members = number(value()?)?,
            "--parallel" => options.parallel = number(value()?)?.max(1),
            "--tls" => options.tls = true,
            "--mode" => match value()?.as_str() {
                "plugin" => options.mode = Mode::Plugin,
                "agent" => options.mode = Mode::Agent,
                "library" => options.mode = Mode::Library,
                other => return Err(format!("--mode {other}: plugin, agent or library")),
            },
            "--data-base" => options.data_base = PathBuf::from(value()?),
            "--plugin-bin" => options.plugin_bin = PathBuf::from(value()?),
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.members < 2 {
        return Err("--members: at least 2 (one is killed for the second phase)".into());
    }
    Ok(options)
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

fn agent_socket(node: usize) -> PathBuf {
    std::env::temp_dir().join(format!("ed-bench-{}", std::process::id())).join(format!("node-{node}.sock"))
}

/// One `etcd-ipam agent` per node, killed when dropped.
struct Agents(Vec<std::process::Child>);

impl Agents {
    fn start(options: &Options) -> Result<Agents, String> {
        let bin = &options.plugin_bin;
        let mut agents = Agents(Vec::new());
        for node in 0..options.nodes {
            let socket = agent_socket(node);
            let child = Command::new(bin)
                .args(["agent", "--socket"])
                .arg(&socket)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {}: {e}", bin.display()))?;
            agents.0.push(child);
            let start = Instant::now();
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                if start.elapsed() > Duration::from_secs(10) {
                    return Err(format!("{} did not listen on {}", bin.display(), socket.display()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(agents)
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = agent_socket(0).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One ADD through the plugin binary; the address it returned.
fn add_by_plugin(bin: &PathBuf, conf: &[u8], container_id: &str) -> Result<IpAddr, String> {
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

/// One node's run: `per_node` ADDs, `parallel` at a time; the addresses and each ADD's
/// latency.
fn run_node(
    options: &Options,
    endpoints: &[String],
    node: usize,
    phase: &str,
) -> Result<Vec<(IpAddr, Duration)>, String> {
    let name = format!("node-{node}");
    let socket = (options.mode == Mode::Agent).then(|| agent_socket(node));
    let conf = network_conf(endpoints, &name, socket.as_ref(), options.pki.as_ref());
    let bytes = conf.to_string().into_bytes();
    let batcher = if options.mode == Mode::Library {
        let parsed = EtcdIpamConfig::parse(&bytes).map_err(|e| e.to_string())?;
        let mut client = parsed.client().map_err(|e| e.to_string())?;
        client.prefer(node);
        Some(Batcher::new(Allocator::new(parsed, client)))
    } else {
        None
    };
    let one_add = |i: usize| -> Result<(IpAddr, Duration), String> {
        let start = Instant::now();
        let ip = match &batcher {
            Some(batcher) => batcher
                .allocate(&format!("{phase}-{node}-{i}/eth0"))
                .map_err(|e| e.to_string())?
                .address
                .addr(),
            None => add_by_plugin(&options.plugin_bin, &bytes, &format!("{phase}-{node}-{i}"))?,
        };
        Ok((ip, start.elapsed()))
    };
    let parallel = options.parallel;
    let workers: Vec<Result<Vec<(IpAddr, Duration)>, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..parallel)
            .map(|w| {
                let one_add = &one_add;
                scope.spawn(move || (w..options.per_node).step_by(parallel).map(one_add).collect())
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("worker thread")).collect()
    });
    let mut out = Vec::with_capacity(options.per_node);
    for worker in workers {
        out.extend(worker?);
    }
    Ok(out)
}

struct Phase {
    addresses: Vec<IpAddr>,
    rate: f64,
    median: Duration,
    p99: Duration,
}

fn run_phase(options: &Options, endpoints: &[String], phase: &str) -> Result<Phase, String> {
    let start = Instant::now();
    let per_node: Vec<Result<Vec<(IpAddr, Duration)>, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> =
            (0..options.nodes).map(|n| scope.spawn(move || run_node(options, endpoints, n, phase))).collect();
        threads.into_iter().map(|t| t.join().expect("node thread")).collect()
    });
    let elapsed = start.elapsed();
    let mut addresses = Vec::new();
    let mut latencies = Vec::new();
    for node in per_node {
        for (ip, latency) in node? {
            addresses.push(ip);
            latencies.push(latency);
        }
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Ok(Phase {
        rate: addresses.len() as f64 / elapsed.as_secs_f64(),
        median: at(0.5),
        p99: at(0.99),
        addresses,
    })
}

fn report(name: &str, phase: &Phase) {
    println!(
        "{name:<28} {:>6} ADDs  {:>8.0} allocations/s  median {:>6.2} ms  p99 {:>6.2} ms",
        phase.addresses.len(),
        phase.rate,
        phase.median.as_secs_f64() * 1e3,
        phase.p99.as_secs_f64() * 1e3
    );
}

fn run(options: &Options) -> Result<(), String> {
    if options.mode != Mode::Library && !options.plugin_bin.exists() {
        return Err(format!(
            "{} not found (build cni-etcd-ipam, or --plugin-bin)",
            options.plugin_bin.display()
        ));
    }
    let mut cluster = if options.tls {
        EtcdCluster::start_tls_in(&options.data_base, "edbench", options.members)
    } else {
        EtcdCluster::start_in(&options.data_base, "edbench", options.members)
    };
    let options = &Options { pki: cluster.pki().cloned(), ..options.clone() };
    let endpoints = cluster.endpoints();
    let _agents = if options.mode == Mode::Agent { Some(Agents::start(options)?) } else { None };
    println!(
        "etcd-ipam-bench: {} nodes x {} ADDs ({} at a time), {} etcd members{} (data under {}), mode {}",
        options.nodes,
        options.per_node,
        options.parallel,
        options.members,
        if options.tls { " over TLS" } else { "" },
        options.data_base.display(),
        match options.mode {
            Mode::Plugin => "plugin (one process per ADD, straight to etcd)",
            Mode::Agent => "agent (one process per ADD, through a node agent)",
            Mode::Library => "library (in-process, one connection per node)",
        }
    );
    let healthy = run_phase(options, &endpoints, "healthy")?;
    report("all members up", &healthy);
    cluster.kill(0);
    let degraded = run_phase(options, &endpoints, "degraded")?;
    report("one member killed", &degraded);

    let all: Vec<IpAddr> = healthy.addresses.iter().chain(&degraded.addresses).copied().collect();
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
    if duplicates != 0
        || handles.len() != all.len()
        || in_blocks.len() != all.len()
        || block_entries != all.len()
    {
        return Err("the allocations are not unique, or etcd disagrees with the results".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_options().and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("etcd-ipam-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
