//! soak: churn. 8 workers each run N ADD/DEL cycles of podman's default chain
//! (bridge + host-local, portmap, firewall, tuning) through libcni, every cycle a new
//! container ID in the worker's own container namespace, all at once on one host. Checked
//! while it runs: no address is held by two live attachments at any moment, and no call
//! fails; checked at the end: no host veth, no reservation, no libcni cache entry and no
//! nftables rule or set element beyond what one ADD+DEL leaves. Prints cycles per second.
//!
//! Long by design (`-n 1250` is the 10,000-cycle soak), so not in the default set:
//! `cni-bench --workloads soak -n N --only-a`. Any duplicate, error or leak fails the run.

use super::chain::{load_list, runtime_conf};
use super::{BenchContext, RatioBy, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::leaks;
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Parallel workers, each with its own container namespace and host port.
pub const WORKERS: usize = 8;
/// Error messages kept for the report (the count is always exact).
const KEPT_ERRORS: usize = 5;

pub struct Soak;

impl Workload for Soak {
    fn id(&self) -> WorkloadId {
        WorkloadId::Soak
    }

    fn title(&self) -> String {
        format!("soak: {WORKERS} workers x N ADD/DEL cycles of the podman chain (dup, error and leak checks)")
    }

    fn needs(&self) -> Vec<&'static str> {
        configs::PODMAN_PLUGINS.to_vec()
    }

    fn rounds(&self, _requested: usize) -> usize {
        1
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        if ctx.pool.len() < WORKERS {
            return Err(BenchError::Check(format!("soak needs -n >= {WORKERS} (one namespace per worker)")));
        }
        let host = BenchHost::create(ctx.state_root())?;
        let list = load_list(&configs::podman_list(host.data_dir()))?;
        let cni = CniConfig::new([set.dir.clone()]).with_cache_dir(host.cache_dir.path());
        let cycles = ctx.containers;
        let churn =
            Churn { cni: &cni, list: &list, ctx, cycles, live: Mutex::default(), tally: Mutex::default() };

        let (wall, baseline) = host.netns.run(|| -> Result<_> {
            // What stays for the network's lifetime (bridge, tables, chains) is made first,
            // so that anything above this baseline at the end is a leak.
            // (With a port mapping: portmap makes its table for the first one.)
            let mut warm = runtime_conf(0, &ctx.pool.get(0).path_str(), true);
            warm.container_id = "cnksoakwarm".into();
            cni.add_network_list(&list, &warm).map_err(|e| BenchError::cni("warm-up ADD", e))?;
            cni.del_network_list(&list, &warm).map_err(|e| BenchError::cni("warm-up DEL", e))?;
            let baseline = crate::leaks::ruleset_lines();
            let started = Instant::now();
            std::thread::scope(|scope| {
                for worker in 0..WORKERS {
                    let churn = &churn;
                    scope.spawn(move || churn.worker(worker));
                }
            });
            Ok((started.elapsed(), baseline))
        })??;
        let tally = churn.tally.into_inner().unwrap_or_else(|e| e.into_inner());
        let leftovers = host.netns.run(|| leftovers(&host, baseline))??;

        let done = tally.cycle_times.len();
        out.op_by(&format!("ADD+DEL cycle x{WORKERS}"), RatioBy::Throughput)
            .add_phase(tally.cycle_times.iter().copied(), wall);
        out.count("cycles", done as u64);
        out.count("duplicate_ips", tally.duplicates);
        out.count("errors", tally.errors.len() as u64 + tally.more_errors);
        out.count("leaked_host_veths", leftovers.veths as u64);
        out.count("leaked_reservations", leftovers.reservations as u64);
        out.count("leaked_cache_entries", leftovers.cache_entries as u64);
        match &leftovers.ruleset_entries {
            Some(lines) => {
                out.count("leaked_ruleset_entries", lines.len() as u64);
                for line in lines.iter().take(KEPT_ERRORS) {
                    out.note(format!("soak: left in nftables: {line}"));
                }
            }
            None => out.note("nftables ruleset not checked (nft not available)"),
        }
        let per_second = done as f64 / wall.as_secs_f64();
        out.fact("cycles_per_second", per_second);
        out.note(format!(
            "soak: {done} cycles ({WORKERS} x {cycles}) in {:.1} s = {per_second:.0} cycles/s; \
             {} duplicate, {} errors, leaked: {} veths, {} reservations, {} cache entries, {} nft entries",
            wall.as_secs_f64(),
            tally.duplicates,
            tally.errors.len() as u64 + tally.more_errors,
            leftovers.veths,
            leftovers.reservations,
            leftovers.cache_entries,
            leftovers.ruleset_entries.as_ref().map_or("unchecked".to_string(), |l| l.len().to_string()),
        ));
        for error in &tally.errors {
            out.note(format!("soak error: {error}"));
        }
        let leaked = leftovers.veths
            + leftovers.reservations
            + leftovers.cache_entries
            + leftovers.ruleset_entries.as_ref().map_or(0, Vec::len);
        let errors = tally.errors.len() as u64 + tally.more_errors;
        if tally.duplicates > 0 || errors > 0 || leaked > 0 || done != WORKERS * cycles {
            return Err(BenchError::Check(format!(
                "soak: {done} of {} cycles, {} duplicates, {errors} errors, {leaked} leaked",
                WORKERS * cycles,
                tally.duplicates
            )));
        }
        Ok(())
    }
}

/// What the workers share.
struct Churn<'a> {
    cni: &'a CniConfig,
    list: &'a NetworkConfigList,
    ctx: &'a BenchContext,
    cycles: usize,
    /// Address -> the attachment holding it, for attachments between ADD and DEL.
    live: Mutex<HashMap<String, String>>,
    tally: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    cycle_times: Vec<Duration>,
    duplicates: u64,
    errors: Vec<String>,
    more_errors: u64,
}

impl Tally {
    fn error(&mut self, message: String) {
        if self.errors.len() < KEPT_ERRORS {
            self.errors.push(message);
        } else {
            self.more_errors += 1;
        }
    }
}

impl Churn<'_> {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `cycles` ADD/DEL cycles in the worker's namespace, each with a new container ID.
    /// Runs on a thread started in the host namespace (threads inherit it).
    fn worker(&self, worker: usize) {
        let netns = self.ctx.pool.get(worker).path_str();
        for cycle in 0..self.cycles {
            if crate::interrupt::interrupted() {
                return;
            }
            // The worker's index picks its namespace and its host port (as in W2).
            let mut rt = runtime_conf(worker, &netns, true);
            rt.container_id = format!("cnksoak-{worker}-{cycle}");
            let started = Instant::now();
            let ok = self.cycle(&rt);
            if ok {
                self.tally().cycle_times.push(started.elapsed());
            }
        }
    }

    /// One ADD then DEL; whether both succeeded. A failed ADD is still DELeted, as a
    /// runtime does.
    fn cycle(&self, rt: &RuntimeConf) -> bool {
        let id = &rt.container_id;
        let mut ok = true;
        let mut held = Vec::new();
        match self.cni.add_network_list(self.list, rt) {
            Ok(result) => {
                let mut live = self.live();
                for ip in super::parallel::result_ips(&result.json) {
                    if let Some(other) = live.insert(ip.clone(), id.clone()) {
                        drop(live);
                        self.tally().duplicates += 1;
                        self.tally().error(format!("{ip} handed to {id} while {other} holds it"));
                        live = self.live();
                    }
                    held.push(ip);
                }
                if held.is_empty() {
                    drop(live);
                    self.tally().error(format!("ADD {id}: no address in the result"));
                    ok = false;
                }
            }
            Err(e) => {
                self.tally().error(format!("ADD {id}: {e}"));
                ok = false;
            }
        }
        // Released from the map before DEL runs: the address may be handed out again
        // only once DEL has released it, which is after this.
        {
            let mut live = self.live();
            for ip in &held {
                if live.get(ip) == Some(id) {
                    live.remove(ip);
                }
            }
        }
        if let Err(e) = self.cni.del_network_list(self.list, rt) {
            self.tally().error(format!("DEL {id}: {e}"));
            ok = false;
        }
        ok
    }
}

/// What the host holds after the last DEL beyond the warm-up's baseline.
struct Leftovers {
    veths: usize,
    reservations: usize,
    cache_entries: usize,
    /// Rules and elements not in the baseline.
    ruleset_entries: Option<Vec<String>>,
}

/// Runs on a thread in the host namespace; waits for background teardown to settle.
fn leftovers(host: &BenchHost, baseline_rules: Option<Vec<String>>) -> Result<Leftovers> {
    let mut veths = 0;
    leaks::settled(Instant::now() + leaks::SETTLE, || {
        veths = leaks::veth_links()?;
        Ok(veths == 0)
    })?;
    let results = host.cache_dir.path().join("results");
    let cache_entries = match std::fs::read_dir(&results) {
        Ok(entries) => entries.count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(BenchError::io(format!("read {}", results.display()), e)),
    };
    Ok(Leftovers {
        veths,
        reservations: leaks::reservations(host.data_dir(), configs::NETWORK)?,
        cache_entries,
        ruleset_entries: match (baseline_rules, crate::leaks::ruleset_lines()) {
            (Some(before), Some(after)) => Some(after.into_iter().filter(|l| !before.contains(l)).collect()),
            _ => None,
        },
    })
}
