//! W4: host-local on its own, run directly (no libcni, whose result cache would dominate
//! a sub-millisecond operation): 10*N ADDs into a /16 then DEL of all, with the latency of
//! the first and last 100; then a small range filled to exhaustion, emptied and refilled.

use super::{container_id, BenchContext, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::spawn::{peak_rss, run_process, ProcessRun};
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const EDGE_WINDOW: usize = 100;
const HELD_SUBNET: &str = "10.64.0.0/16";

pub struct IpamAlone;

impl IpamAlone {
    fn held(ctx: &BenchContext) -> usize {
        10 * ctx.containers
    }

    /// The range filled to exhaustion: a /22 (1,021 usable addresses), a /26 for smoke runs.
    fn exhaust_prefix(ctx: &BenchContext) -> u8 {
        if ctx.smoke {
            26
        } else {
            22
        }
    }
}

impl Workload for IpamAlone {
    fn id(&self) -> WorkloadId {
        WorkloadId::W4
    }

    fn title(&self) -> String {
        "host-local alone: 10*N ADDs into a /16 then DEL of all; a /22 filled to exhaustion and refilled"
            .into()
    }

    fn needs(&self) -> Vec<&'static str> {
        vec!["host-local"]
    }

    /// One round: the Go plugin's cost grows with the reservations it holds, so more
    /// rounds would not fit in the time budget of a full run.
    fn rounds(&self, _requested: usize) -> usize {
        1
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let data = crate::sandbox::state_dir(ctx.state_root(), "ipam")?;
        let ipam = Ipam {
            binary: set.binary("host-local"),
            plugin_dir: set.dir.display().to_string(),
            netns: ctx.pool.get(0).path_str(),
        };

        // Many held reservations.
        let request = configs::ipam_request(data.path(), "cnkipam16", HELD_SUBNET);
        let count = Self::held(ctx);
        let (adds, add_wall) = timed_series(count, |i| ipam.add(&request, i))?;
        let unique: HashSet<&String> = adds.iter().map(|(_, ip)| ip).collect();
        if unique.len() != count {
            return Err(BenchError::Check(format!("{} distinct IPs for {count} ADDs", unique.len())));
        }
        record_with_edges(out, "ADD", &adds.iter().map(|(d, _)| *d).collect::<Vec<_>>(), add_wall);
        if let Some(kib) = ipam.add_peak_rss(&request, count)? {
            out.fact("host_local_add_rss_kib_at_held", kib);
            out.note(format!("host-local ADD peak RSS with {count} held: {:.2} MiB", kib as f64 / 1024.0));
        }
        let (dels, del_wall) = timed_series(count, |i| ipam.del(&request, i))?;
        record_with_edges(out, "DEL", &dels, del_wall);
        out.fact("held_adds", count as u64);

        // Exhaustion and refill of a small range.
        let prefix = Self::exhaust_prefix(ctx);
        let subnet = format!("10.65.0.0/{prefix}");
        let usable = (1usize << (32 - prefix)) - 3; // network, broadcast and gateway
        let request = configs::ipam_request(data.path(), "cnkipamfull", &subnet);
        let fill = fill_until_exhausted(&ipam, &request, usable, 0)?;
        out.op(&format!("fill ADD /{prefix}")).add_phase(fill.adds.iter().copied(), fill.wall);
        out.op(&format!("ADD on exhausted /{prefix}")).add_phase([fill.refused], Duration::ZERO);
        let (dels, del_wall) = timed_series(fill.adds.len(), |i| ipam.del(&request, i))?;
        out.op(&format!("DEL /{prefix}")).add_phase(dels, del_wall);
        let refill = fill_until_exhausted(&ipam, &request, usable, usable + 10)?;
        out.op(&format!("refill ADD /{prefix}")).add_phase(refill.adds.iter().copied(), refill.wall);
        out.fact("exhaust_subnet", subnet.clone());
        out.fact("exhaust_filled", fill.adds.len() as u64);
        out.fact("exhaust_refilled", refill.adds.len() as u64);
        out.note(format!(
            "{subnet}: {} addresses until exhausted ({usable} expected), {} after DEL of all and refill",
            fill.adds.len(),
            refill.adds.len()
        ));
        if fill.adds.len() != usable || refill.adds.len() != usable {
            return Err(BenchError::Check(format!(
                "{subnet} held {} then {} addresses, expected {usable}",
                fill.adds.len(),
                refill.adds.len()
            )));
        }
        Ok(())
    }
}

/// Runs host-local directly.
struct Ipam {
    binary: std::path::PathBuf,
    plugin_dir: String,
    netns: String,
}

impl Ipam {
    fn env<'a>(&'a self, command: &'a str, id: &'a str) -> [(&'a str, &'a str); 6] {
        [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", self.plugin_dir.as_str()),
            ("CNI_ARGS", ""),
        ]
    }

    fn exec(&self, command: &str, request: &Value, index: usize) -> Result<ProcessRun> {
        crate::interrupt::check()?;
        let id = container_id(index);
        let stdin = serde_json::to_vec(request).expect("a JSON value serialises");
        run_process(&self.binary, &self.env(command, &id), &stdin)
    }

    /// ADD of container `index`: its latency and IP.
    fn add(&self, request: &Value, index: usize) -> Result<(Duration, String)> {
        let run = self.exec("ADD", request, index)?;
        if !run.success {
            return Err(BenchError::Plugin(format!("host-local ADD {index} failed: {}", run.stdout_text())));
        }
        Ok((run.elapsed, first_ip(&run.stdout).unwrap_or_default()))
    }

    /// Peak RSS (KiB) of one more ADD (container `index`), which is then released.
    fn add_peak_rss(&self, request: &Value, index: usize) -> Result<Option<u64>> {
        let id = container_id(index);
        let stdin = serde_json::to_vec(request).expect("a JSON value serialises");
        let Some(run) = peak_rss(&self.binary, &self.env("ADD", &id), &stdin)? else {
            return Ok(None);
        };
        if !run.success {
            return Err(BenchError::Plugin(format!("host-local ADD {index} failed: {}", run.stdout_text())));
        }
        self.del(request, index)?;
        Ok(Some(run.max_rss_kib))
    }

    fn del(&self, request: &Value, index: usize) -> Result<Duration> {
        let run = self.exec("DEL", request, index)?;
        if !run.success {
            return Err(BenchError::Plugin(format!("host-local DEL {index} failed: {}", run.stdout_text())));
        }
        Ok(run.elapsed)
    }
}

fn first_ip(stdout: &[u8]) -> Option<String> {
    let result: Value = serde_json::from_slice(stdout).ok()?;
    Some(result.get("ips")?.get(0)?.get("address")?.as_str()?.to_string())
}

fn timed_series<T>(count: usize, mut op: impl FnMut(usize) -> Result<T>) -> Result<(Vec<T>, Duration)> {
    let started = Instant::now();
    let results = (0..count).map(&mut op).collect::<Result<Vec<T>>>()?;
    Ok((results, started.elapsed()))
}

/// All calls, plus the first and last [`EDGE_WINDOW`] on their own and their growth
/// (fact `add_last_over_first` / `del_last_over_first`).
fn record_with_edges(out: &mut SetOutcome, op: &str, latencies: &[Duration], wall: Duration) {
    out.op(op).add_phase(latencies.iter().copied(), wall);
    super::record_growth(out, op, &op.to_lowercase(), latencies, EDGE_WINDOW);
}

struct Fill {
    adds: Vec<Duration>,
    wall: Duration,
    /// Latency of the ADD that was refused.
    refused: Duration,
}

/// ADDs containers `first_index..` until one is refused (at most `usable + 5` tries).
fn fill_until_exhausted(ipam: &Ipam, request: &Value, usable: usize, first_index: usize) -> Result<Fill> {
    let started = Instant::now();
    let mut adds = Vec::with_capacity(usable);
    for index in first_index..first_index + usable + 5 {
        let run = ipam.exec("ADD", request, index)?;
        if !run.success {
            let wall = started.elapsed() - run.elapsed;
            return Ok(Fill { adds, wall, refused: run.elapsed });
        }
        adds.push(run.elapsed);
    }
    Err(BenchError::Check(format!("range still handing out addresses after {} ADDs", adds.len())))
}
