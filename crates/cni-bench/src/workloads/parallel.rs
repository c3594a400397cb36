//! W3: W1 with several workers attaching and detaching containers at once; checks that
//! no IP is handed out twice and that nothing is left behind.

use super::chain::{load_list, runtime_conf};
use super::{BenchContext, RatioBy, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::leaks;
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use libcni::{CniConfig, RuntimeConf};
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const WORKERS: [usize; 2] = [2, 8];

pub struct Parallel;

impl Workload for Parallel {
    fn id(&self) -> WorkloadId {
        WorkloadId::W3
    }

    fn title(&self) -> String {
        "W1 with 2 and 8 parallel workers (throughput; duplicates and leaks checked)".into()
    }

    fn needs(&self) -> Vec<&'static str> {
        configs::BRIDGE_PLUGINS.to_vec()
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        for workers in WORKERS {
            run_with_workers(ctx, set, workers, out)?;
        }
        Ok(())
    }
}

/// What the host held after the DEL of everything, beyond what one ADD+DEL leaves.
#[derive(Debug, Default)]
struct Leftovers {
    reservations: usize,
    veths: usize,
    /// `None` when the ruleset cannot be read.
    ruleset_entries: Option<usize>,
}

fn run_with_workers(ctx: &BenchContext, set: &PluginSet, workers: usize, out: &mut SetOutcome) -> Result<()> {
    let host = BenchHost::create(ctx.state_root())?;
    let list = load_list(&configs::bridge_list(host.data_dir(), true))?;
    let cni = CniConfig::new([set.dir.clone()]).with_cache_dir(host.cache_dir.path());
    let attachments: Vec<RuntimeConf> =
        (0..ctx.containers).map(|i| runtime_conf(i, &ctx.pool.get(i).path_str(), false)).collect();
    let data_dir = host.data_dir().to_path_buf();

    let run = host.netns.run(|| -> Result<_> {
        // One untimed ADD+DEL first: it creates what stays for the network's lifetime
        // (bridge, tables, chains), so what remains after the timed phases beyond this
        // baseline is a leak.
        let warm = RuntimeConf::new("cnkwarmup", ctx.pool.get(0).path_str(), "eth0");
        cni.add_network_list(&list, &warm).map_err(|e| BenchError::cni("warm-up ADD", e))?;
        cni.del_network_list(&list, &warm).map_err(|e| BenchError::cni("warm-up DEL", e))?;
        let baseline_rules = leaks::ruleset_entries();

        let (add, add_wall, ips) = parallel_phase(workers, &attachments, |rt| {
            let result = cni
                .add_network_list(&list, rt)
                .map_err(|e| BenchError::cni(format!("ADD {}", rt.container_id), e))?;
            Ok(result_ips(&result.json))
        })?;
        let (del, del_wall, _) = parallel_phase(workers, &attachments, |rt| {
            cni.del_network_list(&list, rt)
                .map_err(|e| BenchError::cni(format!("DEL {}", rt.container_id), e))?;
            Ok(Vec::new())
        })?;
        let mut veths = 0;
        leaks::settled(Instant::now() + leaks::SETTLE, || {
            veths = leaks::veth_links()?;
            Ok(veths == 0)
        })?;
        let leftovers = Leftovers {
            reservations: leaks::reservations(&data_dir, configs::NETWORK)?,
            veths,
            ruleset_entries: match (baseline_rules, leaks::ruleset_entries()) {
                (Some(before), Some(after)) => Some(after.saturating_sub(before)),
                _ => None,
            },
        };
        Ok((add, add_wall, del, del_wall, ips, leftovers))
    })??;
    let (add, add_wall, del, del_wall, ips, leftovers) = run;

    out.op_by(&format!("ADD x{workers}"), RatioBy::Throughput).add_phase(add, add_wall);
    out.op_by(&format!("DEL x{workers}"), RatioBy::Throughput).add_phase(del, del_wall);
    let duplicates = duplicate_count(&ips);
    out.count("duplicate_ips", duplicates as u64);
    out.count("leaked_reservations", leftovers.reservations as u64);
    out.count("leaked_host_veths", leftovers.veths as u64);
    match leftovers.ruleset_entries {
        Some(n) => out.count("leaked_ruleset_entries", n as u64),
        None => out.note("nftables ruleset not checked (nft not available)"),
    }
    if ips.len() != attachments.len() {
        out.note(format!("x{workers}: {} IPs handed out for {} containers", ips.len(), attachments.len()));
    }
    Ok(())
}

type PhaseOutput = (Vec<Duration>, Duration, Vec<String>);

/// Runs `op` on every attachment with `workers` threads (worker w takes w, w+workers, ...).
/// Threads started here inherit the calling thread's network namespace.
fn parallel_phase(
    workers: usize,
    attachments: &[RuntimeConf],
    op: impl Fn(&RuntimeConf) -> Result<Vec<String>> + Sync,
) -> Result<PhaseOutput> {
    let latencies = Mutex::new(Vec::with_capacity(attachments.len()));
    let ips = Mutex::new(Vec::new());
    let first_error = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let (op, latencies, ips, first_error) = (&op, &latencies, &ips, &first_error);
            scope.spawn(move || {
                for rt in attachments.iter().skip(worker).step_by(workers) {
                    let call = Instant::now();
                    match crate::interrupt::check().and_then(|()| op(rt)) {
                        Ok(found) => {
                            let elapsed = call.elapsed();
                            latencies.lock().unwrap_or_else(|e| e.into_inner()).push(elapsed);
                            ips.lock().unwrap_or_else(|e| e.into_inner()).extend(found);
                        }
                        Err(e) => {
                            first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                            return;
                        }
                    }
                }
            });
        }
    });
    let wall = started.elapsed();
    if let Some(error) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(error);
    }
    let latencies = latencies.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok((latencies, wall, ips.into_inner().unwrap_or_else(|e| e.into_inner())))
}

/// The addresses (without prefix) of a 1.x result.
pub(super) fn result_ips(result: &serde_json::Value) -> Vec<String> {
    result
        .get("ips")
        .and_then(|v| v.as_array())
        .map(|ips| {
            ips.iter()
                .filter_map(|ip| ip.get("address")?.as_str())
                .map(|a| a.split('/').next().unwrap_or(a).to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn duplicate_count(ips: &[String]) -> usize {
    let unique: HashSet<&String> = ips.iter().collect();
    ips.len() - unique.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ips_and_duplicates() {
        let result = json!({"ips": [{"address": "10.88.0.2/16"}, {"address": "fd00::2/64"}]});
        assert_eq!(result_ips(&result), vec!["10.88.0.2", "fd00::2"]);
        assert!(result_ips(&json!({})).is_empty());
        let ips: Vec<String> = ["a", "b", "a", "c", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(duplicate_count(&ips), 2);
    }

    #[test]
    fn parallel_phase_covers_every_item_once_and_reports_errors() {
        let items: Vec<RuntimeConf> =
            (0..17).map(|i| RuntimeConf::new(format!("c{i}"), "/n", "eth0")).collect();
        let (lat, _, ids) = parallel_phase(4, &items, |rt| Ok(vec![rt.container_id.clone()])).unwrap();
        assert_eq!(lat.len(), 17);
        let mut ids = ids;
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 17);
        let failed = parallel_phase(3, &items, |rt| {
            if rt.container_id == "c5" {
                Err(BenchError::Check("boom".into()))
            } else {
                Ok(Vec::new())
            }
        });
        assert!(matches!(failed, Err(BenchError::Check(_))));
    }
}
