//! W1, W1nm, W2, macvlan: one container after another, ADD of all, then DEL of all, through libcni.

use super::{container_id, BenchContext, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use std::time::{Duration, Instant};

/// How many ADDs at the start and at the end W2 compares (flatness in N).
pub(super) const FLATNESS_WINDOW: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// bridge + host-local, with or without ipMasq.
    Bridge { ip_masq: bool },
    /// podman's default chain.
    Podman,
    /// macvlan + host-local on a veth end standing in for the host's NIC.
    Macvlan,
}

pub struct ChainWorkload {
    pub chain: Chain,
}

impl Workload for ChainWorkload {
    fn id(&self) -> WorkloadId {
        match self.chain {
            Chain::Bridge { ip_masq: true } => WorkloadId::W1,
            Chain::Bridge { ip_masq: false } => WorkloadId::W1nm,
            Chain::Podman => WorkloadId::W2,
            Chain::Macvlan => WorkloadId::Macvlan,
        }
    }

    fn title(&self) -> String {
        match self.chain {
            Chain::Bridge { ip_masq: true } => "bridge (isGateway, ipMasq) + host-local".into(),
            Chain::Bridge { ip_masq: false } => "bridge (isGateway) + host-local, no ipMasq".into(),
            Chain::Podman => {
                "podman default chain: bridge+host-local, portmap (1 mapping), firewall, tuning".into()
            }
            Chain::Macvlan => "macvlan (bridge mode) + host-local".into(),
        }
    }

    fn needs(&self) -> Vec<&'static str> {
        match self.chain {
            Chain::Bridge { .. } => configs::BRIDGE_PLUGINS.to_vec(),
            Chain::Podman => configs::PODMAN_PLUGINS.to_vec(),
            Chain::Macvlan => configs::MACVLAN_PLUGINS.to_vec(),
        }
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        let host = BenchHost::create(ctx.state_root())?;
        let config = match self.chain {
            Chain::Bridge { ip_masq } => configs::bridge_list(host.data_dir(), ip_masq),
            Chain::Podman => configs::podman_list(host.data_dir()),
            Chain::Macvlan => {
                add_master(&host)?;
                configs::macvlan_list(host.data_dir())
            }
        };
        let list = load_list(&config)?;
        let cni = CniConfig::new([set.dir.clone()]).with_cache_dir(host.cache_dir.path());
        let podman = self.chain == Chain::Podman;
        let attachments: Vec<RuntimeConf> =
            (0..ctx.containers).map(|i| runtime_conf(i, &ctx.pool.get(i).path_str(), podman)).collect();

        let phases = host.netns.run(|| sequential_add_del(&cni, &list, &attachments))??;
        out.op("ADD").add_phase(phases.add.iter().copied(), phases.add_wall);
        out.op("DEL").add_phase(phases.del.iter().copied(), phases.del_wall);
        if podman {
            record_flatness(out, &phases.add);
        }
        Ok(())
    }
}

/// The macvlans' master in the run's host namespace: a veth pair, both ends up (a
/// macvlan has carrier only while its master has).
fn add_master(host: &BenchHost) -> Result<()> {
    use cni_net::netlink::{LinkSpec, VethSpec};
    let setup = |e| BenchError::setup("create the macvlan master", e);
    let mut nl = cni_net::Netlink::in_ns(host.netns.ns()).map_err(setup)?;
    nl.add_veth(&VethSpec { link: LinkSpec::new(configs::MACVLAN_MASTER), peer: LinkSpec::new("cnkm1") })
        .map_err(setup)?;
    for name in [configs::MACVLAN_MASTER, "cnkm1"] {
        let link = nl.require_link(name).map_err(setup)?;
        nl.set_link_up(link.index).map_err(setup)?;
    }
    Ok(())
}

/// ADD latency of the first and last [`FLATNESS_WINDOW`] containers (pooled over rounds),
/// and how much the end's median exceeds the start's: flat in N means close to 1.
pub(super) fn record_flatness(out: &mut SetOutcome, add: &[Duration]) {
    super::record_growth(out, "ADD", "add", add, FLATNESS_WINDOW);
}

pub(super) fn load_list(config: &serde_json::Value) -> Result<NetworkConfigList> {
    let bytes = serde_json::to_vec(config).expect("a JSON value serialises");
    NetworkConfigList::from_bytes(&bytes).map_err(|e| BenchError::cni("load the workload's network list", e))
}

/// The attachment of container `index`; podman's also carries what podman sends.
pub(super) fn runtime_conf(index: usize, netns: &str, podman: bool) -> RuntimeConf {
    let rt = RuntimeConf::new(container_id(index), netns, "eth0");
    if !podman {
        return rt;
    }
    rt.with_arg("IgnoreUnknown", "1")
        .with_arg("K8S_POD_NAME", format!("cnk-pod-{index}"))
        .with_capability("portMappings", configs::port_mapping(index))
}

pub(super) struct Phases {
    pub add: Vec<Duration>,
    pub add_wall: Duration,
    pub del: Vec<Duration>,
    pub del_wall: Duration,
}

/// ADD of every attachment, then DEL of every attachment, each call timed. Runs on the
/// calling thread, which must be in the run's host namespace.
pub(super) fn sequential_add_del(
    cni: &CniConfig,
    list: &NetworkConfigList,
    attachments: &[RuntimeConf],
) -> Result<Phases> {
    let started = Instant::now();
    let mut add = Vec::with_capacity(attachments.len());
    for rt in attachments {
        crate::interrupt::check()?;
        let call = Instant::now();
        cni.add_network_list(list, rt).map_err(|e| BenchError::cni(format!("ADD {}", rt.container_id), e))?;
        add.push(call.elapsed());
    }
    let add_wall = started.elapsed();
    let started = Instant::now();
    let mut del = Vec::with_capacity(attachments.len());
    for rt in attachments {
        let call = Instant::now();
        cni.del_network_list(list, rt).map_err(|e| BenchError::cni(format!("DEL {}", rt.container_id), e))?;
        del.push(call.elapsed());
    }
    Ok(Phases { add, add_wall, del, del_wall: started.elapsed() })
}
