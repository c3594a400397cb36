//! podman: what a podman user waits for — `podman run --rm` of a container that exits at
//! once — with podman's CNI backend on the set's plugins, and with podman's own default
//! stack, netavark + aardvark-dns (Debian's packages), in the same round, run by run
//! alternately, so both see the same machine.
//!
//! Per stack: a container on the default bridge network, the same with a port mapping
//! (`-p`), [`CONCURRENT`] such runs at once (throughput), and, once per set, a container
//! with `--network none`: what a start costs without any network. The network stack's
//! share of a start is then (bridge - none) / bridge, from the medians.
//!
//! podman runs in cni-e2e's engine host (a throwaway network namespace and private
//! mounts, storage in temp dirs), never on the machine's own network or podman state.
//! Setting podman up and importing the image are not timed. Only when named (it needs
//! podman, crun, netavark and aardvark-dns).

use std::path::Path;
use std::time::{Duration, Instant};

use cni_e2e::plugin_dir::PluginDir;
use cni_e2e::podman::{NetworkBackend, Podman};

use super::{guarded, BenchContext, RatioBy, SetOutcome, Workload};
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::stats::median;

/// Runs of each kind per stack and round: a `podman run` takes a few hundred ms.
pub const MAX_RUNS: usize = 20;
/// Containers started at once in the throughput phase.
pub const CONCURRENT: usize = 8;
const NETAVARK: &str = "/usr/lib/podman/netavark";

pub struct PodmanWorkload;

/// One kind of run: its operation name and podman's flags before the image.
struct RunKind {
    op: &'static str,
    flags: &'static [&'static str],
}

const BRIDGE: RunKind = RunKind { op: "run --rm, bridge", flags: &[] };
const PUBLISHED: RunKind = RunKind { op: "run --rm, bridge -p", flags: &["-p", "18080:80"] };
const NO_NETWORK: RunKind = RunKind { op: "run --rm, --network none", flags: &["--network", "none"] };

fn timed_run(podman: &Podman, kind: &RunKind) -> Result<Duration> {
    guarded(kind.op, || podman.timed_run_rm(kind.flags, &["true"]).1)
}

/// [`CONCURRENT`] runs of `kind` at once, `rounds` times; the wall time of each batch.
fn concurrent_batches(podman: &Podman, kind: &RunKind, rounds: usize) -> Result<Vec<Duration>> {
    let mut walls = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let results: Vec<Result<Duration>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CONCURRENT)
                .map(|_| scope.spawn(|| timed_run(podman, &RunKind { op: kind.op, flags: &[] })))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(BenchError::Plugin("panicked".into()))))
                .collect()
        });
        walls.push(started.elapsed());
        for result in results {
            result?;
        }
    }
    Ok(walls)
}

impl Workload for PodmanWorkload {
    fn id(&self) -> WorkloadId {
        WorkloadId::Podman
    }

    fn title(&self) -> String {
        format!(
            "podman run --rm (CNI backend on the set, and netavark alternately), up to {MAX_RUNS} runs each, \
             {CONCURRENT} at once"
        )
    }

    fn needs(&self) -> Vec<&'static str> {
        cni_e2e::podman::PODMAN_CHAIN.to_vec()
    }

    fn rounds(&self, _requested: usize) -> usize {
        1
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        for (program, package) in [("/usr/bin/podman", "podman"), (NETAVARK, "netavark")] {
            if !Path::new(program).exists() {
                return Err(BenchError::io(
                    "podman",
                    std::io::Error::other(format!("needs Debian's {package}")),
                ));
            }
        }
        let runs = ctx.containers.min(MAX_RUNS);
        let label = if set.label == "A" { "ours" } else { "B" };
        let cni = guarded("set up podman (CNI)", || {
            Podman::set_up_on(PluginDir::at(&set.dir, label), NetworkBackend::Cni)
        })?;
        let netavark = guarded("set up podman (netavark)", || {
            Podman::set_up_on(PluginDir::at(&set.dir, "unused"), NetworkBackend::Netavark)
        })?;
        // The first run of each pays for creating the default network's bridge and rules.
        timed_run(&cni, &BRIDGE)?;
        timed_run(&netavark, &BRIDGE)?;

        for _ in 0..runs {
            for kind in [&BRIDGE, &PUBLISHED] {
                let ours = timed_run(&cni, kind)?;
                out.op(kind.op).add_phase([ours], ours);
                let theirs = timed_run(&netavark, kind)?;
                let op = format!("netavark: {}", kind.op);
                out.op(&op).add_phase([theirs], theirs);
            }
            let none = timed_run(&cni, &NO_NETWORK)?;
            out.op(NO_NETWORK.op).add_phase([none], none);
        }

        let batches = (runs / CONCURRENT).max(1);
        for (podman, op) in [(&cni, "8 concurrent runs"), (&netavark, "netavark: 8 concurrent runs")] {
            for wall in concurrent_batches(podman, &BRIDGE, batches)? {
                // Throughput: CONCURRENT containers per batch's wall time.
                out.op_by(op, RatioBy::Throughput)
                    .add_phase(std::iter::repeat_n(wall / CONCURRENT as u32, CONCURRENT), wall);
            }
        }

        network_share(out);
        out.fact("runs", runs as u64);
        Ok(())
    }
}

/// The network stack's share of a container start: how much longer a bridged start takes
/// than one without a network, over the bridged start's median.
fn network_share(out: &mut SetOutcome) {
    let med = |out: &SetOutcome, op: &str| out.find(op).and_then(|o| median(&o.timings.samples));
    let Some(none) = med(out, NO_NETWORK.op) else { return };
    for op in [BRIDGE.op.to_string(), format!("netavark: {}", BRIDGE.op)] {
        if let Some(bridged) = med(out, &op) {
            let network = bridged.saturating_sub(none);
            let share = network.as_secs_f64() / bridged.as_secs_f64();
            let key = if op.starts_with("netavark") { "netavark_network_share" } else { "network_share" };
            out.fact(key, (share * 1000.0).round() / 1000.0);
            out.note(format!(
                "{op}: network {:.1} ms of {:.1} ms ({:.0}%), from the median without a network",
                network.as_secs_f64() * 1e3,
                bridged.as_secs_f64() * 1e3,
                share * 100.0
            ));
        }
    }
}
