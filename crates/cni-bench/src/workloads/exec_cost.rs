//! W5: the cost of starting a plugin (VERSION of each, with `/bin/true` as the floor), the
//! bytes of the whole plugin set, and the peak RSS of one bridge ADD.

use super::{container_id, BenchContext, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use crate::spawn::{peak_rss, peak_rss_floor_kib, run_process};
use crate::stats::median;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const TRUE_BINARY: &str = "/bin/true";
pub const TRUE_OP: &str = "/bin/true";
pub const VERSION_ALL_OP: &str = "VERSION (all plugins)";
pub const BRIDGE_ADD_OP: &str = "bridge ADD (direct exec)";

pub struct ExecCost {
    /// The plugins whose VERSION is timed (those present in every set).
    pub plugins: Vec<String>,
}

impl ExecCost {
    fn repetitions(ctx: &BenchContext) -> usize {
        if ctx.smoke {
            3
        } else {
            20
        }
    }

    fn rss_samples(ctx: &BenchContext) -> usize {
        if ctx.smoke { 2 } else { 5 }.min(ctx.pool.len())
    }
}

impl Workload for ExecCost {
    fn id(&self) -> WorkloadId {
        WorkloadId::W5
    }

    fn title(&self) -> String {
        "exec cost: VERSION of each plugin vs /bin/true; plugin set size; peak RSS of one bridge ADD".into()
    }

    fn needs(&self) -> Vec<&'static str> {
        Vec::new()
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let version_request = br#"{"cniVersion":"1.0.0"}"#;
        let env = [("CNI_COMMAND", "VERSION")];
        for _ in 0..Self::repetitions(ctx) {
            // Interleaved, so load changes hit the floor and the plugins alike.
            let floor = run_process(Path::new(TRUE_BINARY), &env, version_request)?;
            out.op(TRUE_OP).add_phase([floor.elapsed], Duration::ZERO);
            for plugin in &self.plugins {
                let run = run_process(&set.binary(plugin), &env, version_request)?;
                if !run.success {
                    return Err(BenchError::Plugin(format!(
                        "{plugin} VERSION failed: {}",
                        run.stdout_text()
                    )));
                }
                out.op(VERSION_ALL_OP).add_phase([run.elapsed], Duration::ZERO);
                out.op(&format!("VERSION {plugin}")).add_phase([run.elapsed], Duration::ZERO);
            }
        }
        let ratio = |out: &SetOutcome| {
            let get = |name: &str| out.find(name).and_then(|o| median(&o.timings.samples));
            Some(get(VERSION_ALL_OP)?.as_secs_f64() / get(TRUE_OP)?.as_secs_f64())
        };
        if let Some(r) = ratio(out) {
            out.fact("version_over_true", r);
        }

        let size = set.size_bytes()?;
        out.fact("plugin_set_bytes", size);
        if set.binary("bridge").is_file() {
            out.fact("per_exec_binary_bytes", set.per_exec_bytes()?);
        }

        if set.missing(&configs::BRIDGE_PLUGINS).is_empty() {
            measure_bridge_rss(ctx, set, out)?;
        } else if let Some(reason) = set.skip_reason(&configs::BRIDGE_PLUGINS) {
            out.note(format!("bridge ADD RSS {reason}"));
        }
        Ok(())
    }
}

/// Latency (direct exec) and peak RSS (through GNU time, see [`crate::spawn`]) of bridge
/// ADD with ipMasq, delegating to host-local; the RSS is the larger of the plugin's and
/// its IPAM child's peaks.
fn measure_bridge_rss(ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
    let host = BenchHost::create(ctx.state_root())?;
    let list = configs::bridge_list(host.data_dir(), true);
    let mut request: Value = list["plugins"][0].clone();
    request["name"] = json!(configs::NETWORK);
    request["cniVersion"] = list["cniVersion"].clone();
    let stdin = serde_json::to_vec(&request).expect("a JSON value serialises");
    let plugin_dir = set.dir.display().to_string();
    let bridge = set.binary("bridge");
    let samples = ExecCost::rss_samples(ctx);

    let (latencies, rss) = host.netns.run(|| -> Result<(Vec<Duration>, Vec<u64>)> {
        let (mut latencies, mut rss) = (Vec::new(), Vec::new());
        for index in 0..samples {
            let id = container_id(index);
            let netns = ctx.pool.get(index).path_str();
            let env = |command| {
                [
                    ("CNI_COMMAND", command),
                    ("CNI_CONTAINERID", id.as_str()),
                    ("CNI_NETNS", netns.as_str()),
                    ("CNI_IFNAME", "eth0"),
                    ("CNI_PATH", plugin_dir.as_str()),
                ]
            };
            let succeeded = |what: &str, run: &crate::spawn::ProcessRun| {
                if run.success {
                    Ok(())
                } else {
                    Err(BenchError::Plugin(format!("bridge {what} failed: {}", run.stdout_text())))
                }
            };
            let add = run_process(&bridge, &env("ADD"), &stdin)?;
            succeeded("ADD", &add)?;
            latencies.push(add.elapsed);
            // DEL each time, so the container namespace is clean again.
            succeeded("DEL", &run_process(&bridge, &env("DEL"), &stdin)?)?;
            if let Some(measured) = peak_rss(&bridge, &env("ADD"), &stdin)? {
                succeeded("ADD", &measured)?;
                rss.push(measured.max_rss_kib);
                succeeded("DEL", &run_process(&bridge, &env("DEL"), &stdin)?)?;
            }
        }
        Ok((latencies, rss))
    })??;

    out.op(BRIDGE_ADD_OP).add_phase(latencies, Duration::ZERO);
    if rss.is_empty() {
        out.note("peak RSS not measured: /usr/bin/time (Debian package `time`) is missing");
        return Ok(());
    }
    let mut all: Vec<u64> = out
        .facts
        .get("bridge_add_rss_kib_samples")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    all.extend(rss);
    all.sort_unstable();
    out.fact("bridge_add_rss_kib_median", all[all.len() / 2]);
    out.fact("bridge_add_rss_kib_max", all[all.len() - 1]);
    out.fact("bridge_add_rss_kib_samples", all);
    if let Some(floor) = peak_rss_floor_kib()? {
        out.fact("rss_floor_kib", floor);
    }
    Ok(())
}
