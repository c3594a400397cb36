//! cri: what kubelet waits for on a node with containerd — `RunPodSandbox` of a pod with a
//! hostPort and the bandwidth annotations, through containerd's CRI plugin, on the set's
//! plugins (its loopback network and the Kubernetes-style conflist of `cni_e2e::cri`:
//! bridge + host-local, portmap, firewall, tuning, bandwidth).
//!
//! Per set: RunPodSandbox of that pod, and of a hostNetwork pod (no CNI call at all: what
//! a sandbox costs without a network), run alternately; StopPodSandbox and
//! RemovePodSandbox after each are not timed. The network's share of a sandbox start is
//! (pod - hostNetwork) / pod, from the medians. containerd runs in cni-e2e's engine host
//! (throwaway network and mount namespaces, its state in temp dirs); starting it, importing
//! the image and a first, untimed pod (which creates the bridge and per-network rules) are
//! not timed. Only when named (it needs containerd, runc and busybox-static).

use std::time::{Duration, Instant};

use cni_e2e::containerd::Containerd;
use cni_e2e::cri::{conflist, host_network, pod, Cri, CHAIN};
use cni_e2e::plugin_dir::PluginDir;

use super::{guarded, BenchContext, SetOutcome, Workload};
use crate::error::Result;
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::stats::median;

/// Pods of each kind per set: a RunPodSandbox takes a few hundred ms.
pub const MAX_RUNS: usize = 20;

const POD: &str = "RunPodSandbox, hostPort + bandwidth";
const HOST_NETWORK: &str = "RunPodSandbox, hostNetwork";

pub struct CriWorkload;

/// Times one RunPodSandbox of `config`, then stops and removes the pod.
fn timed_pod(cri: &mut Cri, config: cni_e2e::cri::api::PodSandboxConfig) -> Result<Duration> {
    guarded("RunPodSandbox", || {
        let started = Instant::now();
        let id = cri.run_pod(config).unwrap_or_else(|e| panic!("RunPodSandbox: {e}"));
        let took = started.elapsed();
        cri.stop(&id);
        cri.remove(&id);
        took
    })
}

impl Workload for CriWorkload {
    fn id(&self) -> WorkloadId {
        WorkloadId::Cri
    }

    fn title(&self) -> String {
        format!("containerd's CRI plugin: RunPodSandbox (hostPort + bandwidth, and hostNetwork), up to {MAX_RUNS} each")
    }

    fn needs(&self) -> Vec<&'static str> {
        CHAIN.to_vec()
    }

    fn rounds(&self, _requested: usize) -> usize {
        1
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let runs = ctx.containers.min(MAX_RUNS);
        let label = if set.label == "A" { "ours" } else { "B" };
        let (_containerd, mut cri) = guarded("start containerd with its CRI plugin", || {
            let containerd = Containerd::start_cri(PluginDir::at(&set.dir, label), Some(&conflist()), CHAIN);
            let cri = Cri::connect(&containerd);
            (containerd, cri)
        })?;
        timed_pod(&mut cri, pod("bench-first"))?;
        for run in 0..runs {
            let networked = timed_pod(&mut cri, pod(&format!("bench-pod-{run}")))?;
            out.op(POD).add_phase([networked], networked);
            let bare = timed_pod(&mut cri, host_network(&format!("bench-host-{run}")))?;
            out.op(HOST_NETWORK).add_phase([bare], bare);
        }
        network_share(out);
        out.fact("runs", runs as u64);
        Ok(())
    }
}

/// The network's share of a sandbox start, from the medians of both kinds.
fn network_share(out: &mut SetOutcome) {
    let med = |op: &str| out.find(op).and_then(|o| median(&o.timings.samples));
    let (Some(pod), Some(bare)) = (med(POD), med(HOST_NETWORK)) else { return };
    let network = pod.saturating_sub(bare);
    let share = network.as_secs_f64() / pod.as_secs_f64();
    out.fact("network_share", (share * 1000.0).round() / 1000.0);
    out.note(format!(
        "{POD}: network {:.1} ms of {:.1} ms ({:.0}%), from the hostNetwork median",
        network.as_secs_f64() * 1e3,
        pod.as_secs_f64() * 1e3,
        share * 100.0
    ));
}
