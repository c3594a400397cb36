//! The workloads, and the runner that alternates the plugin sets over rounds.

pub mod chain;
mod cri;
mod dhcp;
mod dns;
pub mod exec_cost;
mod floor;
mod ipam;
mod nft_scale;
mod parallel;
mod plugin_scale;
mod podman;
mod shaping;
mod soak;

pub use chain::ChainWorkload;
pub use cri::CriWorkload;
pub use dhcp::DhcpWorkload;
pub use dns::DnsWorkload;
pub use exec_cost::ExecCost;
pub use floor::run_floor_round;
pub use ipam::IpamAlone;
pub use nft_scale::NftScale;
pub use parallel::Parallel;
pub use plugin_scale::PluginScale;
pub use podman::PodmanWorkload;
pub use shaping::Shaping;
pub use soak::Soak;

use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::ContainerPool;
use crate::stats::{median, Timings};
use serde_json::{Map, Value};
use std::time::Duration;

/// Turns the engine helpers' panics (they are test helpers: a failed engine command
/// panics with its output) into the workload's error.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        BenchError::io(what.to_string(), std::io::Error::other(text))
    })
}

/// What every workload shares: the size, and the container namespaces made up front.
pub struct BenchContext {
    pub containers: usize,
    pub smoke: bool,
    pub pool: ContainerPool,
    /// Holds every on-disk state of the run (see [`crate::sandbox::state_root`]).
    pub state: tempfile::TempDir,
}

impl BenchContext {
    pub fn state_root(&self) -> &std::path::Path {
        self.state.path()
    }
}

/// How the B/A ratio of an operation is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatioBy {
    /// Median latency of B over that of A.
    Median,
    /// Throughput of A over that of B (parallel phases, where latency is not the point).
    Throughput,
}

#[derive(Debug, Clone)]
pub struct Operation {
    pub name: String,
    pub timings: Timings,
    pub ratio_by: RatioBy,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Ran,
    Skipped(String),
    Failed(String),
}

/// What one plugin set (or the floor) did in one workload, pooled over rounds.
#[derive(Debug, Clone)]
pub struct SetOutcome {
    pub label: String,
    pub status: Status,
    pub ops: Vec<Operation>,
    /// Facts for the JSON (counts, sizes, check results).
    pub facts: Map<String, Value>,
    /// Lines for the printed report.
    pub notes: Vec<String>,
}

impl SetOutcome {
    pub fn new(label: &str, skip: Option<String>) -> SetOutcome {
        SetOutcome {
            label: label.to_string(),
            status: skip.map_or(Status::Ran, Status::Skipped),
            ops: Vec::new(),
            facts: Map::new(),
            notes: Vec::new(),
        }
    }

    /// The timings of operation `name` (ratio by median), created on first use.
    pub fn op(&mut self, name: &str) -> &mut Timings {
        self.op_by(name, RatioBy::Median)
    }

    pub fn op_by(&mut self, name: &str, ratio_by: RatioBy) -> &mut Timings {
        let index = match self.ops.iter().position(|o| o.name == name) {
            Some(index) => index,
            None => {
                self.ops.push(Operation { name: name.to_string(), timings: Timings::default(), ratio_by });
                self.ops.len() - 1
            }
        };
        &mut self.ops[index].timings
    }

    pub fn find(&self, name: &str) -> Option<&Operation> {
        self.ops.iter().find(|o| o.name == name)
    }

    /// Adds `n` to counter `key` (checks accumulate over rounds).
    pub fn count(&mut self, key: &str, n: u64) {
        let old = self.facts.get(key).and_then(Value::as_u64).unwrap_or(0);
        self.facts.insert(key.to_string(), Value::from(old + n));
    }

    pub fn fact(&mut self, key: &str, value: impl Into<Value>) {
        self.facts.insert(key.to_string(), value.into());
    }

    pub fn note(&mut self, line: impl Into<String>) {
        let line = line.into();
        if !self.notes.contains(&line) {
            self.notes.push(line);
        }
    }

    pub fn ran(&self) -> bool {
        self.status == Status::Ran
    }
}

/// A workload run against a plugin set.
pub trait Workload {
    fn id(&self) -> WorkloadId;
    fn title(&self) -> String;
    /// Plugins the set must have.
    fn needs(&self) -> Vec<&'static str>;
    /// How many rounds to run when `requested` were asked for.
    fn rounds(&self, requested: usize) -> usize {
        requested
    }
    /// Whether the workload measures our library rather than a plugin set: it then runs
    /// once per round (as set A) and every other set is skipped.
    fn library_only(&self) -> bool {
        false
    }
    /// One round against `set`.
    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()>;
}

/// Why a library workload has no outcome for sets other than A.
pub const LIBRARY_ONLY: &str = "skipped: measures our library, not a plugin set";

/// A workload's results for every set.
pub struct WorkloadReport {
    pub id: WorkloadId,
    pub title: String,
    pub outcomes: Vec<SetOutcome>,
}

/// A workload being run round after round.
pub struct WorkloadRun {
    workload: Box<dyn Workload>,
    report: WorkloadReport,
}

impl WorkloadRun {
    pub fn new(workload: Box<dyn Workload>, sets: &[PluginSet]) -> WorkloadRun {
        let needs = workload.needs();
        let library = workload.library_only();
        let outcomes = sets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let skip =
                    if library && i > 0 { Some(LIBRARY_ONLY.to_string()) } else { s.skip_reason(&needs) };
                SetOutcome::new(s.label, skip)
            })
            .collect();
        let report = WorkloadReport { id: workload.id(), title: workload.title(), outcomes };
        WorkloadRun { workload, report }
    }

    /// Whether round `round` (1-based) of `rounds` runs this workload.
    pub fn runs_in(&self, round: usize, rounds: usize) -> bool {
        round <= self.workload.rounds(rounds)
    }

    /// Runs round `round` (1-based) of `rounds`: A, then B. Does nothing once the
    /// workload's own round count is reached.
    pub fn run_round(&mut self, ctx: &mut BenchContext, sets: &[PluginSet], round: usize, rounds: usize) {
        if !self.runs_in(round, rounds) {
            return;
        }
        let own_rounds = self.workload.rounds(rounds);
        let name = self.workload.id().name();
        for (set, out) in sets.iter().zip(self.report.outcomes.iter_mut()) {
            if !out.ran() || crate::interrupt::interrupted() {
                continue;
            }
            eprintln!("cni-bench: {name} round {round}/{own_rounds}: set {}", set.label);
            if let Err(e) = self.workload.run(ctx, set, out) {
                eprintln!("cni-bench: {name} set {} failed: {e}", set.label);
                out.status = Status::Failed(e.to_string());
            }
            after_run(ctx, out);
            out.fact("rounds", round as u64);
        }
    }

    pub fn finish(self) -> WorkloadReport {
        self.report
    }
}

/// Puts back any container namespace a run left something in, and says so.
pub fn after_run(ctx: &mut BenchContext, out: &mut SetOutcome) {
    match ctx.pool.reset_dirty() {
        Ok(0) => {}
        Ok(dirty) => {
            out.count("container_namespaces_left_dirty", dirty as u64);
            out.note(format!("{dirty} container namespace(s) still held links after DEL (replaced)"));
        }
        Err(e) => eprintln!("cni-bench: cannot reset container namespaces: {e}"),
    }
}

/// Latency of the first and last `window` calls of `op` (pooled over rounds) as operations
/// of their own, and how much the end's median exceeds the start's as fact
/// `<key>_last_over_first` (flat in N: close to 1); returns that ratio.
pub fn record_growth(
    out: &mut SetOutcome,
    op: &str,
    key: &str,
    samples: &[Duration],
    window: usize,
) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let window = window.min(samples.len() / 2).max(1);
    let first_name = format!("{op} first {window}");
    let last_name = format!("{op} last {window}");
    out.op(&first_name).add_phase(samples[..window].iter().copied(), Duration::ZERO);
    out.op(&last_name).add_phase(samples[samples.len() - window..].iter().copied(), Duration::ZERO);
    let pooled = |out: &SetOutcome, name: &str| out.find(name).and_then(|o| median(&o.timings.samples));
    let (first, last) = (pooled(out, &first_name)?, pooled(out, &last_name)?);
    let growth = last.as_secs_f64() / first.as_secs_f64();
    out.fact(&format!("{key}_last_over_first"), growth);
    let prefix = format!("growth of {op}:");
    out.notes.retain(|n| !n.starts_with(&prefix));
    out.note(format!("{prefix} median of the last {window} is {growth:.2}x that of the first {window}"));
    Some(growth)
}

/// The `i`th container's ID: unique within a run (each run has fresh state dirs).
pub fn container_id(i: usize) -> String {
    format!("cnkbench{i:05}")
}
