//! dns: container name resolution, each set's `dnsname` after bridge + host-local. Ours
//! registers names with `cni-dnsd` (found next to cni-bench, where `cargo build --release
//! -p cni-dnsd` puts it); the reference starts one dnsmasq for the network and edits its
//! hosts file. Timed: ADD and DEL of every container through libcni, and queries from one
//! container to the gateway for the others' names (latency of each, queries/s of the run),
//! and the resolver's own CPU time per query (all its threads' on-CPU time from the
//! kernel's schedstat, taken around the queries: unlike latency, it hardly moves with the
//! machine's other load, so it says where a difference comes from on a busy host).
//!
//! The reference keeps its files under `$XDG_RUNTIME_DIR/containers/cni/dnsname`: the
//! variable is pointed into the run's state root while the workload runs, so nothing is
//! written under the host's /run. Whatever resolver is left is killed by its pid file.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{BenchContext, RatioBy, SetOutcome, Workload};
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use serde_json::json;

pub const MAX_CONTAINERS: usize = 50;
const BRIDGE: &str = "cnkdns0";
const NETWORK: &str = "cnkdns";
const GATEWAY: &str = "10.78.0.1:53";

pub struct DnsWorkload;

fn pod_name(i: usize) -> String {
    format!("cnk-dns-{i}")
}

/// Kills the process whose pid `file` holds, if any.
fn kill_by_pid_file(file: &Path) {
    let Some(pid) = std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
        return;
    };
    // A pid the resolver wrote for itself in this run's state root; it may be gone already.
    let _ = cni_os::process::kill(pid, cni_os::process::Signal::KILL);
}

/// The pid the set's resolver wrote: ours (`cni-dnsd`) or the reference's dnsmasq.
fn resolver_pid(dir: &Path) -> Option<u32> {
    let ours = dir.join("dnsname/dnsd.pid");
    let reference = dir.join(format!("xdg/containers/cni/dnsname/{NETWORK}/pidfile"));
    [ours, reference].iter().find_map(|file| std::fs::read_to_string(file).ok()?.trim().parse().ok())
}

/// The on-CPU time of every thread of `pid` so far, in ns (the first field of each
/// thread's `/proc/<pid>/task/<tid>/schedstat`).
fn cpu_time_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// One A query over UDP; Ok(true) when it was answered with an address.
fn ask(socket: &UdpSocket, id: u16, name: &str) -> std::io::Result<bool> {
    let mut query = Message::new();
    query.set_id(id).set_recursion_desired(true);
    let name = Name::from_ascii(name).map_err(std::io::Error::other)?;
    query.add_query(Query::query(name, RecordType::A));
    socket.send(&query.to_vec().map_err(std::io::Error::other)?)?;
    let mut buf = [0u8; 1500];
    loop {
        let n = socket.recv(&mut buf)?;
        let Ok(reply) = Message::from_vec(&buf[..n]) else { continue };
        if reply.id() == id {
            return Ok(!reply.answers().is_empty());
        }
    }
}

/// The network: bridge + host-local, then dnsname, its state under `dir`.
fn network_config(dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.78.0.0/16"}]],
                      "dataDir": dir.join("ipam")}},
            {"type": "dnsname", "domainName": "dns.podman", "stateDir": dir.join("dnsname"),
             "capabilities": {"aliases": true}},
        ],
    })
}

/// What a run of queries measured.
struct QueryRun {
    /// The latency of each answered query.
    samples: Vec<Duration>,
    /// The whole run's.
    wall: Duration,
    unanswered: u64,
}

/// `queries` A queries to the gateway's resolver for the names of containers 1..n, round
/// robin; run inside container 0's namespace.
fn query_the_others(n: usize, queries: usize) -> std::io::Result<QueryRun> {
    let gateway: SocketAddr = GATEWAY.parse().expect("a valid address");
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.connect(gateway)?;
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut samples = Vec::with_capacity(queries);
    let mut unanswered = 0;
    let started = Instant::now();
    for q in 0..queries {
        let name = format!("{}.dns.podman.", pod_name(1 + q % (n - 1)));
        let call = Instant::now();
        match ask(&socket, q as u16, &name) {
            Ok(true) => samples.push(call.elapsed()),
            _ => unanswered += 1,
        }
    }
    Ok(QueryRun { samples, wall: started.elapsed(), unanswered })
}

impl Workload for DnsWorkload {
    fn id(&self) -> WorkloadId {
        WorkloadId::Dns
    }

    fn title(&self) -> String {
        format!("bridge + host-local + dnsname: ADD/DEL and name queries, up to {MAX_CONTAINERS} containers")
    }

    fn needs(&self) -> Vec<&'static str> {
        vec!["bridge", "host-local", "dnsname"]
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let host = BenchHost::create(ctx.state_root())?;
        let dir = host.data_dir().to_path_buf();
        let xdg = dir.join("xdg");
        std::fs::create_dir_all(&xdg).map_err(|e| BenchError::io("create the XDG runtime dir", e))?;
        let old_xdg = std::env::var_os("XDG_RUNTIME_DIR");
        std::env::set_var("XDG_RUNTIME_DIR", &xdg);
        let result = self.measure(ctx, set, &host, &dir, out);
        kill_by_pid_file(&dir.join("dnsname/dnsd.pid"));
        kill_by_pid_file(&xdg.join(format!("containers/cni/dnsname/{NETWORK}/pidfile")));
        match old_xdg {
            Some(v) => std::env::set_var("XDG_RUNTIME_DIR", v),
            None => std::env::remove_var("XDG_RUNTIME_DIR"),
        }
        result
    }
}

impl DnsWorkload {
    fn measure(
        &self,
        ctx: &BenchContext,
        set: &PluginSet,
        host: &BenchHost,
        dir: &Path,
        out: &mut SetOutcome,
    ) -> Result<()> {
        let list = super::chain::load_list(&network_config(dir))?;
        // Ours finds cni-dnsd in CNI_PATH: the set's directory, then cni-bench's own.
        let mut dirs: Vec<PathBuf> = vec![set.dir.clone()];
        if let Some(own) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            dirs.push(own);
        }
        let cni = libcni::CniConfig::new(dirs).with_cache_dir(host.cache_dir.path());
        let n = ctx.containers.clamp(2, MAX_CONTAINERS).min(ctx.pool.len());
        let attachments: Vec<libcni::RuntimeConf> = (0..n)
            .map(|i| {
                super::chain::runtime_conf(i, &ctx.pool.get(i).path_str(), false)
                    .with_arg("IgnoreUnknown", "1")
                    .with_arg("K8S_POD_NAME", pod_name(i))
            })
            .collect();

        let mut add = Vec::with_capacity(n);
        let started = Instant::now();
        for rt in &attachments {
            crate::interrupt::check()?;
            let call = Instant::now();
            host.netns
                .run(|| cni.add_network_list(&list, rt))?
                .map_err(|e| BenchError::cni(format!("ADD {}", rt.container_id), e))?;
            add.push(call.elapsed());
        }
        out.op("ADD").add_phase(add.iter().copied(), started.elapsed());

        // Queries from the first container for every other one's name, round robin.
        let queries = if ctx.smoke { 200 } else { 2000 };
        let pid = resolver_pid(dir);
        let cpu_before = pid.and_then(cpu_time_ns);
        let timed = ctx.pool.get(0).run(|| query_the_others(n, queries))?;
        if let (Some(before), Some(after)) = (cpu_before, pid.and_then(cpu_time_ns)) {
            out.count("resolver_cpu_ns", after.saturating_sub(before));
            out.count("resolver_cpu_queries", queries as u64);
        }
        let QueryRun { samples, wall, unanswered } =
            timed.map_err(|e| BenchError::io("query the resolver", e))?;
        out.op_by("query", RatioBy::Median).add_phase(samples.iter().copied(), wall);
        out.fact("queries_per_s", (samples.len() as f64 / wall.as_secs_f64()).round());
        out.count("queries_unanswered", unanswered);

        let mut del = Vec::with_capacity(n);
        let started = Instant::now();
        for rt in &attachments {
            let call = Instant::now();
            host.netns
                .run(|| cni.del_network_list(&list, rt))?
                .map_err(|e| BenchError::cni(format!("DEL {}", rt.container_id), e))?;
            del.push(call.elapsed());
        }
        out.op("DEL").add_phase(del.iter().copied(), started.elapsed());
        out.fact("containers", n as u64);
        Ok(())
    }
}
