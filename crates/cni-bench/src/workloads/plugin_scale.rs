//! W6: portmap and firewall on their own, run directly with a made-up prevResult (they
//! only need the container's address): ADD of N containers, then DEL of all, each plugin
//! in its own host namespace. Whether the cost of an operation grows with the number of
//! containers already attached (a cost that must not grow with the host's load) shows as the first 20 calls against the
//! last 20; what the ruleset holds after the DELs is checked against before the ADDs.

use super::chain::FLATNESS_WINDOW;
use super::{container_id, record_growth, BenchContext, SetOutcome, Workload};
use crate::configs;
use crate::error::{BenchError, Result};
use crate::leaks;
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::BenchHost;
use crate::spawn::run_process;
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::time::Duration;

/// The plugins timed, in order.
pub const PLUGINS: [&str; 2] = ["portmap", "firewall"];

pub struct PluginScale;

impl Workload for PluginScale {
    fn id(&self) -> WorkloadId {
        WorkloadId::W6
    }

    fn title(&self) -> String {
        "portmap and firewall alone: ADD of N containers then DEL, first 20 vs last 20".into()
    }

    fn needs(&self) -> Vec<&'static str> {
        PLUGINS.to_vec()
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        for plugin in PLUGINS {
            let host = BenchHost::create(ctx.state_root())?;
            let runner =
                Runner { binary: set.binary(plugin), plugin_dir: set.dir.display().to_string(), plugin };
            let (add, del, leaked) = host.netns.run(|| runner.add_then_del(ctx))??;
            out.op(&format!("{plugin} ADD")).add_phase(add.iter().copied(), Duration::ZERO);
            out.op(&format!("{plugin} DEL")).add_phase(del.iter().copied(), Duration::ZERO);
            record_growth(out, &format!("{plugin} ADD"), &format!("{plugin}_add"), &add, FLATNESS_WINDOW);
            record_growth(out, &format!("{plugin} DEL"), &format!("{plugin}_del"), &del, FLATNESS_WINDOW);
            if let Some(leaked) = leaked {
                out.count(&format!("{plugin}_leaked_ruleset_entries"), leaked as u64);
            }
        }
        Ok(())
    }
}

/// Runs one plugin directly, on the calling thread (which is in the run's host namespace).
struct Runner<'a> {
    binary: std::path::PathBuf,
    plugin_dir: String,
    plugin: &'a str,
}

impl Runner<'_> {
    /// One untimed ADD+DEL (the first creates the tables that stay), then the ADD of every
    /// container and the DEL of every container, each timed. Also returns how many more
    /// ruleset entries there are after the DELs than before the ADDs (`None`: no `nft`).
    fn add_then_del(&self, ctx: &BenchContext) -> Result<(Vec<Duration>, Vec<Duration>, Option<usize>)> {
        let warm_up = ctx.containers;
        self.call("ADD", ctx, warm_up)?;
        self.call("DEL", ctx, warm_up)?;
        let before = leaks::ruleset_entries();
        let add = (0..ctx.containers).map(|i| self.call("ADD", ctx, i)).collect::<Result<Vec<_>>>()?;
        let del = (0..ctx.containers).map(|i| self.call("DEL", ctx, i)).collect::<Result<Vec<_>>>()?;
        let leaked = match (before, leaks::ruleset_entries()) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before)),
            _ => None,
        };
        Ok((add, del, leaked))
    }

    /// `command` for container `index` (the warm-up container, `index == N`, borrows the
    /// first namespace); returns its latency.
    fn call(&self, command: &str, ctx: &BenchContext, index: usize) -> Result<Duration> {
        crate::interrupt::check()?;
        let netns = ctx.pool.get(index % ctx.containers).path_str();
        let id = container_id(index);
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", id.as_str()),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", self.plugin_dir.as_str()),
            ("CNI_ARGS", ""),
        ];
        let stdin =
            serde_json::to_vec(&request(self.plugin, index, &netns)).expect("a JSON value serialises");
        let run = run_process(&self.binary, &env, &stdin)?;
        if !run.success {
            return Err(BenchError::Plugin(format!(
                "{} {command} {index} failed: {}",
                self.plugin,
                run.stdout_text()
            )));
        }
        Ok(run.elapsed)
    }
}

/// Container `index`'s address: 10.88.0.2/16 onwards, as bridge + host-local would give.
fn address(index: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 88, 0, 2)) + index as u32)
}

/// The plugin's stdin: its config with the prevResult of an attachment to `netns`.
fn request(plugin: &str, index: usize, netns: &str) -> Value {
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": configs::NETWORK,
        "type": plugin,
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": netns}],
            "ips": [{"address": format!("{}/16", address(index)), "gateway": "10.88.0.1", "interface": 0}],
        },
    });
    if plugin == "portmap" {
        conf["runtimeConfig"] = json!({"portMappings": configs::port_mapping(index)});
    }
    conf
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn requests_carry_the_address_and_portmap_its_mapping() {
        let portmap = request("portmap", 300, "/run/netns/x");
        assert_eq!(portmap["prevResult"]["ips"][0]["address"], "10.88.1.46/16");
        assert_eq!(portmap["runtimeConfig"]["portMappings"][0]["hostPort"], 20300);
        let firewall = request("firewall", 0, "/run/netns/x");
        assert_eq!(firewall["prevResult"]["ips"][0]["address"], "10.88.0.2/16");
        assert!(firewall.get("runtimeConfig").is_none());
        assert_eq!(
            Path::new(&firewall["prevResult"]["interfaces"][0]["sandbox"].as_str().unwrap()),
            Path::new("/run/netns/x")
        );
    }
}
