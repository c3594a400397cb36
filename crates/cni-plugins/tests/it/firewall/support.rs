//! Shared by the firewall tests: a host namespace with bridges made by the real `bridge`
//! plugin, container namespaces, and an "outside world" namespace wired to the host by a
//! veth (10.250.0.1 host / 10.250.0.2 world) with the host routing between them.

use crate::common::{add, call};
use cni_net::netlink::{AddressFlags, IpFamily, LinkCondition, LinkSpec, Route, VethSpec};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::runner::PluginOutput;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

pub const PREFIX: &str = "cnw";
pub const WORLD_IP: &str = "10.250.0.2";
pub const HOST_UPLINK_IP: &str = "10.250.0.1";
pub const WORLD_IP6: &str = "fd50::2";

pub struct Lab {
    pub env: HostAndContainers,
    pub world: TestNetns,
}

impl Lab {
    /// A host with `n` containers and the outside world; forwarding on in the host.
    pub fn new(n: usize) -> Lab {
        let env = HostAndContainers::with_prefix(PREFIX, n).unwrap();
        let world = TestNetns::with_prefix(PREFIX).unwrap();
        let mut host = env.host.netlink().unwrap();
        let uplink = host
            .add_veth(&VethSpec {
                link: LinkSpec::new("cnwup"),
                peer: LinkSpec::new("eth0").netns(world.netns()),
            })
            .unwrap()
            .unwrap();
        host.add_address(
            uplink.index,
            format!("{HOST_UPLINK_IP}/24").parse().unwrap(),
            AddressFlags::empty(),
        )
        .unwrap();
        host.set_link_up(uplink.index).unwrap();
        let mut w = world.netlink().unwrap();
        let eth0 = w.require_link("eth0").unwrap();
        w.add_address(eth0.index, format!("{WORLD_IP}/24").parse().unwrap(), AddressFlags::empty()).unwrap();
        w.set_link_up(eth0.index).unwrap();
        w.wait_for_link(eth0.index, LinkCondition::Carrier, Duration::from_secs(5)).unwrap();
        w.add_route(&Route::default_route(IpFamily::V4).gateway(HOST_UPLINK_IP.parse().unwrap())).unwrap();
        cni_net::sysctl::write_in(env.host.netns(), "net.ipv4.ip_forward", "1").unwrap();
        Lab { env, world }
    }

    /// Adds IPv6 to the uplink (host fd50::1, world fd50::2) and IPv6 forwarding.
    pub fn with_ipv6(self) -> Lab {
        let mut host = self.env.host.netlink().unwrap();
        let uplink = host.require_link("cnwup").unwrap();
        host.add_address(uplink.index, "fd50::1/64".parse().unwrap(), AddressFlags::Nodad).unwrap();
        let mut w = self.world.netlink().unwrap();
        let eth0 = w.require_link("eth0").unwrap();
        w.add_address(eth0.index, format!("{WORLD_IP6}/64").parse().unwrap(), AddressFlags::Nodad).unwrap();
        w.add_route(&Route::default_route(IpFamily::V6).gateway("fd50::1".parse().unwrap())).unwrap();
        cni_net::sysctl::write_in(self.env.host.netns(), "net.ipv6.conf.all.forwarding", "1").unwrap();
        self
    }

    /// Runs `bridge` with one IPv4 and one IPv6 address and default routes for both.
    pub fn bridge_add_dual(&self, i: usize, network: &str, bridge: &str, v4: &str, v6: &str) -> Value {
        let conf = json!({"cniVersion": "1.0.0", "name": network, "type": "bridge", "bridge": bridge,
            "isGateway": true, "ipam": {"type": "static", "addresses": [{"address": v4}, {"address": v6}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}});
        add("bridge", &self.env.host, self.container(i), &conf)
    }

    pub fn world(&self) -> &TestNetns {
        &self.world
    }

    pub fn container(&self, i: usize) -> &TestNetns {
        &self.env.containers[i]
    }

    /// Runs `bridge` (static IPAM, gateway .1, default route) for container `i`.
    pub fn bridge_add(&self, i: usize, version: &str, network: &str, bridge: &str, address: &str) -> Value {
        let conf = json!({"cniVersion": version, "name": network, "type": "bridge", "bridge": bridge,
            "isGateway": true, "ipam": {"type": "static", "addresses": [{"address": address}],
            "routes": [{"dst": "0.0.0.0/0"}]}});
        add("bridge", &self.env.host, self.container(i), &conf)
    }

    /// Runs `firewall` `command` for container `i` (or for no container: GC, STATUS).
    pub fn firewall(&self, command: &str, i: Option<usize>, conf: &Value) -> PluginOutput {
        call("firewall", command, &self.env.host, i.map(|i| self.container(i)), conf).run()
    }

    /// `nft list ruleset` inside the host namespace (the oracle).
    pub fn nft_ruleset(&self) -> String {
        self.env.host.nft_text()
    }

    /// A command's stdout inside the host namespace, which must succeed.
    pub fn host_cmd(&self, program: &str, args: &[&str]) -> String {
        let out = self.env.host.command(program).args(args).output().unwrap();
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

/// `iptables-save -t filter` as a set of lines, without comments and packet counters.
pub fn filter_lines(lab: &Lab) -> BTreeSet<String> {
    lab.host_cmd("iptables-save", &["-t", "filter"])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.find(" [") {
            Some(i) if l.starts_with(':') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect()
}

/// Everything either backend could have left in the host namespace: the iptables filter
/// table and the whole nftables ruleset (packet counters zeroed: stray traffic must not
/// make two equal rulesets differ).
pub fn firewall_state(lab: &Lab) -> (BTreeSet<String>, Vec<Value>) {
    let mut nft = lab.env.host.nft_json();
    nft.iter_mut().for_each(zero_counters);
    (filter_lines(lab), nft)
}

fn zero_counters(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::Object(counter)) = object.get_mut("counter") {
                counter.values_mut().for_each(|v| *v = json!(0));
            }
            object.values_mut().for_each(zero_counters);
        }
        Value::Array(items) => items.iter_mut().for_each(zero_counters),
        _ => {}
    }
}

/// The firewall configuration chained after `prev`.
pub fn firewall_conf(version: &str, network: &str, extra: Value, prev: Option<&Value>) -> Value {
    let mut conf = json!({"cniVersion": version, "name": network, "type": "firewall"});
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
    }
    if let Some(prev) = prev {
        conf["prevResult"] = prev.clone();
    }
    conf
}

pub fn ok(out: &PluginOutput) {
    assert!(out.success(), "plugin failed ({}): {}\nstderr: {}", out.status, out.stdout, out.stderr);
}

/// A TCP echo from `from` to a server in `to` at `addr` must work.
pub fn assert_reaches(from: &TestNetns, to: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    tcp_echo(from.netns(), addr, b"through the firewall", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{} -> {addr} should pass: {e}", from.name()));
}

/// A TCP echo from `from` to a server in `to` at `addr` must not get through.
pub fn assert_blocked(from: &TestNetns, to: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    let r = tcp_echo(from.netns(), addr, b"should be dropped", Duration::from_millis(800));
    assert!(r.is_err(), "{} -> {addr} should be blocked but got through", from.name());
}
