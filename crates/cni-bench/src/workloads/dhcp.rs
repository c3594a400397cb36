//! dhcp: bridge + dhcp IPAM against a real DHCP server (dnsmasq, Debian `dnsmasq-base`) in
//! a server namespace on the run's bridge, each set with its own lease daemon (ours keeps
//! its state in the run's state root). ADD of all, then DEL of all, through libcni.
//!
//! dhcp6: the same with DHCPv6 (`"families": [6]`). Ours only: the reference dhcp IPAM
//! speaks DHCPv4 alone, so a Go set is skipped with that reason. An ADD includes waiting
//! for the container interface's link-local address to finish duplicate address
//! detection (the kernel's, about a second), which DHCPv6 needs as its source.
//!
//! The Go daemon's ADD takes seconds, so this workload uses at most [`MAX_CONTAINERS`] containers
//! and one round; setting up the network (bridge, server veth, dnsmasq) is not timed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{BenchContext, SetOutcome, Status, Workload};
use crate::error::{BenchError, Result};
use crate::options::WorkloadId;
use crate::plugin_set::PluginSet;
use crate::sandbox::{BenchHost, OwnedNetns};
use cni_net::netlink::{AddressFlags, BridgeOptions, IpFamily, LinkSpec, VethSpec};
use cni_net::Netlink;
use cni_testkit::dnsmasq;
use serde_json::json;

pub const MAX_CONTAINERS: usize = 20;
const BRIDGE: &str = "cnkd0";

pub struct DhcpWorkload {
    /// DHCPv6 rather than DHCPv4.
    pub v6: bool,
}

/// Kills and reaps a process it owns when dropped (also on error paths).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's side of the run: the host's bridge, a veth from it into `server`, and the
/// server's address, made over netlink like everything else in the run.
fn wire_server(host: &OwnedNetns, server: &OwnedNetns, v6: bool) -> Result<()> {
    let setup = |what: &str| {
        let what = what.to_string();
        move |e| BenchError::setup(what, e)
    };
    let mut nl = Netlink::in_ns(host.ns()).map_err(setup("open netlink in the host namespace"))?;
    nl.add_bridge(&LinkSpec::new(BRIDGE), &BridgeOptions::default()).map_err(setup("create the bridge"))?;
    let bridge = nl.require_link(BRIDGE).map_err(setup("look up the bridge"))?;
    nl.set_link_up(bridge.index).map_err(setup("set the bridge up"))?;
    let veth = VethSpec { link: LinkSpec::new("vsrv"), peer: LinkSpec::new("srv0").netns(server.ns()) };
    let port = nl.add_veth(&veth).map_err(setup("create the server's veth"))?;
    let port =
        port.ok_or_else(|| BenchError::io("create the server's veth", std::io::Error::other("no link")))?;
    nl.set_link_master(port.index, bridge.index).map_err(setup("attach the server's veth"))?;
    nl.set_link_up(port.index).map_err(setup("set the server's veth up"))?;

    let mut nl = Netlink::in_ns(server.ns()).map_err(setup("open netlink in the server namespace"))?;
    let srv = nl.require_link("srv0").map_err(setup("look up the server's interface"))?;
    let address = "10.77.0.1/16".parse().expect("a valid address");
    nl.add_address(srv.index, address, AddressFlags::empty()).map_err(setup("address the server"))?;
    if v6 {
        let address = "fd77::1/64".parse().expect("a valid address");
        nl.add_address(srv.index, address, AddressFlags::Nodad).map_err(setup("address the server (v6)"))?;
    }
    nl.set_link_up(srv.index).map_err(setup("set the server's interface up"))?;
    if v6 {
        // dnsmasq answers DHCPv6 from the link-local address: wait until it is usable.
        wait_for("the server's link-local address", || {
            nl.addresses(Some(srv.index), Some(IpFamily::V6)).is_ok_and(|addrs| {
                addrs.iter().any(|a| a.scope == 253 && !a.flags.contains(AddressFlags::Tentative))
            })
        })?;
    }
    Ok(())
}

/// Starts `binary args` inside `netns` (spawned from a thread in it).
fn spawn_in(netns: &OwnedNetns, binary: &Path, args: &[String], log: &Path) -> Result<Reaped> {
    let log = std::fs::File::create(log).map_err(|e| BenchError::io("create a log file", e))?;
    let child = netns.run(|| Command::new(binary).args(args).stdout(Stdio::null()).stderr(log).spawn())?;
    let child = child.map_err(|e| BenchError::io(format!("start {}", binary.display()), e))?;
    Ok(Reaped(child))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return Err(BenchError::io(what.to_string(), std::io::Error::other("timed out")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl Workload for DhcpWorkload {
    fn id(&self) -> WorkloadId {
        if self.v6 {
            WorkloadId::Dhcp6
        } else {
            WorkloadId::Dhcp
        }
    }

    fn title(&self) -> String {
        let protocol = if self.v6 { "DHCPv6" } else { "DHCPv4" };
        format!(
            "bridge + dhcp {protocol} (each set's daemon) against dnsmasq, up to {MAX_CONTAINERS} containers"
        )
    }

    fn needs(&self) -> Vec<&'static str> {
        vec!["bridge", "dhcp"]
    }

    fn rounds(&self, _requested: usize) -> usize {
        1
    }

    fn run(&self, ctx: &BenchContext, set: &PluginSet, out: &mut SetOutcome) -> Result<()> {
        if !Path::new(dnsmasq::BINARY).exists() {
            out.note("needs dnsmasq (Debian package dnsmasq-base)");
            return Err(BenchError::io("dhcp", std::io::Error::other("dnsmasq is not installed")));
        }
        // Ours keeps leases on disk (the -statedir flag); the reference has no DHCPv6.
        let daemon_bin = set.binary("dhcp");
        let help = Command::new(&daemon_bin).args(["daemon", "--help"]).output();
        let ours = help.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("-statedir"));
        if self.v6 && !ours {
            out.status = Status::Skipped(
                "skipped: no Go counterpart (the reference dhcp IPAM speaks DHCPv4 only)".into(),
            );
            return Ok(());
        }
        let host = BenchHost::create(ctx.state_root())?;
        let server = OwnedNetns::create(&format!("cnk-s{}-{}", std::process::id(), ctx.pool.len()))?;
        wire_server(&host.netns, &server, self.v6)?;

        let dir = host.data_dir();
        let network_args: &[&str] = if self.v6 {
            &["--dhcp-range=fd77::100,fd77::ffff,64,1h", "--dhcp-option=option6:dns-server,[fd77::53]"]
        } else {
            &["--dhcp-range=10.77.1.0,10.77.255.250,255.255.0.0,1h", "--dhcp-option=3,10.77.0.1"]
        };
        let mut dnsmasq_args = dnsmasq::dhcp_only_args("srv0", &dir.join("dnsmasq.leases"));
        dnsmasq_args.extend(network_args.iter().map(|s| s.to_string()));
        let _dnsmasq =
            spawn_in(&server, Path::new(dnsmasq::BINARY), &dnsmasq_args, &dir.join("dnsmasq.log"))?;

        // Ours keeps leases on disk: in the run's state root, not in /var/lib/cni/dhcp.
        let socket = dir.join("dhcp.sock");
        let mut daemon_args = vec!["daemon".to_string(), "-socketpath".into(), socket.display().to_string()];
        if ours {
            daemon_args.extend(["-statedir".into(), dir.join("leases").display().to_string()]);
        }
        let _daemon = spawn_in(&host.netns, &daemon_bin, &daemon_args, &dir.join("daemon.log"))?;
        wait_for("the dhcp daemon's socket", || socket.exists())?;

        let mut ipam = json!({"type": "dhcp", "daemonSocketPath": socket});
        if self.v6 {
            ipam["families"] = json!([6]);
            ipam["ipv6PrefixLength"] = json!(64);
        }
        let config = json!({
            "cniVersion": "1.0.0",
            "name": "cnkdhcp",
            "plugins": [{"type": "bridge", "bridge": BRIDGE, "ipam": ipam}],
        });
        let list = super::chain::load_list(&config)?;
        let cni = libcni::CniConfig::new([set.dir.clone()]).with_cache_dir(host.cache_dir.path());
        let n = ctx.containers.min(MAX_CONTAINERS);
        let attachments: Vec<libcni::RuntimeConf> =
            (0..n).map(|i| super::chain::runtime_conf(i, &ctx.pool.get(i).path_str(), false)).collect();
        let phases = host.netns.run(|| super::chain::sequential_add_del(&cni, &list, &attachments))??;
        out.op("ADD").add_phase(phases.add.iter().copied(), phases.add_wall);
        out.op("DEL").add_phase(phases.del.iter().copied(), phases.del_wall);
        out.fact("containers", n as u64);
        Ok(())
    }
}
