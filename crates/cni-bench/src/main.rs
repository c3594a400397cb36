//! cni-bench: runs CNI workloads against our plugins (A) and another plugin set (B, by
//! default the Go reference in /usr/lib/cni), alternating A and B over rounds, each run in
//! namespaces made before timing starts, and prints median/p90/p99, throughput and B/A.

mod configs;
mod error;
mod interrupt;
mod leaks;
mod options;
mod plugin_set;
mod report;
mod sandbox;
mod spawn;
mod stats;
mod workloads;

use error::Result;
use options::{Options, WorkloadId};
use plugin_set::PluginSet;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use workloads::chain::Chain;
use workloads::{
    BenchContext, ChainWorkload, CriWorkload, DhcpWorkload, DnsWorkload, ExecCost, IpamAlone, NftScale,
    Parallel, PluginScale, PodmanWorkload, SetOutcome, Shaping, Soak, Workload, WorkloadReport, WorkloadRun,
};

fn main() -> ExitCode {
    let options = cni_cli::parse::<options::Args>().into_options();
    if !cni_os::is_root() {
        eprintln!("cni-bench: must run as root (it creates network namespaces and runs plugins)");
        return ExitCode::FAILURE;
    }
    interrupt::install_handlers();
    sandbox::remove_stale_namespaces();
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cni-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn plugin_sets(options: &Options) -> Result<Vec<PluginSet>> {
    let a = match (&options.dir_a, &options.plugins_bin) {
        (Some(dir), _) => PluginSet::from_dir("A", dir.clone())?,
        (None, Some(binary)) => PluginSet::install("A", binary)?,
        (None, None) => PluginSet::install("A", &plugin_set::sibling_plugins_binary()?)?,
    };
    let mut sets = vec![a];
    if !options.only_a {
        match &options.dir_b {
            Some(dir) => sets.push(PluginSet::from_dir("B", dir.clone())?),
            None if Path::new(options::DEFAULT_B).is_dir() => {
                sets.push(PluginSet::from_dir("B", PathBuf::from(options::DEFAULT_B))?)
            }
            None => eprintln!("cni-bench: {} not found: running A alone", options::DEFAULT_B),
        }
    }
    Ok(sets)
}

/// The plugins whose VERSION W5 times: those every set has.
fn common_plugins(sets: &[PluginSet]) -> Result<Vec<String>> {
    let mut names = sets[0].plugin_names()?;
    for set in &sets[1..] {
        let other = set.plugin_names()?;
        names.retain(|n| other.contains(n));
    }
    Ok(names)
}

fn run(options: &Options) -> Result<()> {
    let started = Instant::now();
    let sets = plugin_sets(options)?;
    for set in &sets {
        eprintln!("cni-bench: set {} = {} ({} binaries)", set.label, set.dir.display(), set.linkage());
    }
    if sets[0].linkage() == "dynamic" {
        eprintln!("cni-bench: warning: A is linked dynamically; the shipped build is `cargo build-plugins`");
    }
    let load_before = load_average();
    eprintln!("cni-bench: creating {} container namespaces (not timed)", options.containers);
    let pool = sandbox::ContainerPool::create(options.containers)?;
    let state = sandbox::state_root(&options.state_dir)?;
    eprintln!("cni-bench: state (reservations, result caches) in {}", state.path().display());
    let mut ctx = BenchContext { containers: options.containers, smoke: options.smoke, pool, state };

    let (mut runs, mut floor) = workload_runs(options, &sets)?;
    let rounds_done = run_rounds(options, started, &mut ctx, &sets, &mut runs, floor.as_mut());
    let reports: Vec<WorkloadReport> = runs.into_iter().map(WorkloadRun::finish).collect();
    let goals = report::goals(&reports);

    let mut text = String::new();
    for set in &sets {
        text.push_str(&format!("{}: {} ({} binaries)\n", set.label, set.dir.display(), set.linkage()));
    }
    text.push_str(&format!(
        "N={} rounds={rounds_done} of {} (W4: 1), {} CPUs, load {load_before} before\n\n",
        options.containers,
        options.rounds,
        cpus(),
    ));
    text.push_str(&report::table(&reports, floor.as_ref()));
    if sets.len() > 1 {
        text.push('\n');
        text.push_str(&report::goals_text(&goals));
    }
    let elapsed = started.elapsed();
    text.push_str(&format!("\ntotal run time {:.0} s\n", elapsed.as_secs_f64()));
    println!("{text}");

    if let Some(path) = &options.json {
        let meta = json!({
            "containers": options.containers,
            "rounds_requested": options.rounds,
            "rounds_done": rounds_done,
            "smoke": options.smoke,
            "workloads": options.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
            "sets": sets.iter().map(|s| json!({"label": s.label, "dir": s.dir})).collect::<Vec<_>>(),
            "cpus": cpus(),
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            "load_before": load_before,
            "load_after": load_average(),
            "run_seconds": elapsed.as_secs_f64(),
        });
        let document = report::to_json(&reports, floor.as_ref(), &goals, meta);
        let bytes = serde_json::to_vec_pretty(&document).expect("a JSON value serialises");
        std::fs::write(path, bytes)
            .map_err(|e| error::BenchError::io(format!("write {}", path.display()), e))?;
        eprintln!("cni-bench: wrote {}", path.display());
    }
    interrupt::check()
}

/// The chosen workloads, in the order asked for; the floor (which has no plugin set) apart.
fn workload_runs(options: &Options, sets: &[PluginSet]) -> Result<(Vec<WorkloadRun>, Option<SetOutcome>)> {
    let mut runs = Vec::new();
    let mut floor = None;
    for id in &options.workloads {
        let workload: Box<dyn Workload> = match id {
            WorkloadId::W1 => Box::new(ChainWorkload { chain: Chain::Bridge { ip_masq: true } }),
            WorkloadId::W1nm => Box::new(ChainWorkload { chain: Chain::Bridge { ip_masq: false } }),
            WorkloadId::W2 => Box::new(ChainWorkload { chain: Chain::Podman }),
            WorkloadId::W3 => Box::new(Parallel),
            WorkloadId::W4 => Box::new(IpamAlone),
            WorkloadId::W5 => Box::new(ExecCost { plugins: common_plugins(sets)? }),
            WorkloadId::W6 => Box::new(PluginScale),
            WorkloadId::W7 => Box::new(Shaping),
            WorkloadId::Nft => Box::new(NftScale),
            WorkloadId::Dhcp => Box::new(DhcpWorkload { v6: false }),
            WorkloadId::Dhcp6 => Box::new(DhcpWorkload { v6: true }),
            WorkloadId::Dns => Box::new(DnsWorkload),
            WorkloadId::Macvlan => Box::new(ChainWorkload { chain: Chain::Macvlan }),
            WorkloadId::Soak => Box::new(Soak),
            WorkloadId::Podman => Box::new(PodmanWorkload),
            WorkloadId::Cri => Box::new(CriWorkload),
            WorkloadId::Floor => {
                floor = Some(SetOutcome::new("floor", None));
                continue;
            }
        };
        runs.push(WorkloadRun::new(workload, sets));
    }
    Ok((runs, floor))
}

/// Runs the rounds; returns how many ran.
///
/// Round-major: every workload gets its first round before any gets a second, so the time
/// budget cuts rounds evenly instead of dropping the last workloads. A round starts only
/// if, at the pace of the previous one, it ends within the budget.
fn run_rounds(
    options: &Options,
    started: Instant,
    ctx: &mut BenchContext,
    sets: &[PluginSet],
    runs: &mut [WorkloadRun],
    mut floor: Option<&mut SetOutcome>,
) -> usize {
    let mut rounds_done = 0;
    let mut took: Vec<Duration> = vec![Duration::ZERO; runs.len()];
    let mut floor_took = Duration::ZERO;
    for round in 1..=options.rounds {
        if interrupt::interrupted() {
            break;
        }
        let projected = runs
            .iter()
            .zip(&took)
            .filter(|(run, _)| run.runs_in(round, options.rounds))
            .map(|(_, t)| *t)
            .sum::<Duration>()
            + floor_took;
        if round > 1 && started.elapsed() + projected > options.budget {
            eprintln!(
                "cni-bench: stopping after {rounds_done} round(s): another would exceed the time budget"
            );
            break;
        }
        for (run, took) in runs.iter_mut().zip(took.iter_mut()) {
            let run_started = Instant::now();
            run.run_round(ctx, sets, round, options.rounds);
            *took = run_started.elapsed();
        }
        if let Some(floor) = floor.as_deref_mut() {
            let floor_started = Instant::now();
            workloads::run_floor_round(ctx, floor, round);
            floor_took = floor_started.elapsed();
        }
        rounds_done = round;
    }
    rounds_done
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
