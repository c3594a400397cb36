//! Shared by the kill -9 suite and the GC property test: a lab (a host namespace,
//! container namespaces, one state directory for every plugin's files), the plugin
//! configurations, chains of plugins run the way libcni runs them (ADD in order with the
//! previous result, DEL in reverse), GC with a valid set, and the lab's whole state as
//! lines ([`host_state`]).

pub mod host_state;

use crate::common::{call, plugin_dir};
use cni_net::netlink::{LinkSpec, VethSpec};
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{PluginCall, PluginOutput};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every name these suites make carries it (namespaces, links, temp dirs).
pub const PREFIX: &str = "ks";
pub const NETWORK: &str = "ksnet";
pub const VERSION: &str = "1.1.0";
/// The macvlans' master in the host namespace (a veth end standing in for a NIC).
pub const MACVLAN_MASTER: &str = "ksm0";
/// The namespace-wide sysctl tuning sets in the container, restored by its DEL.
pub const TUNED_SYSCTL: &str = "net.core.somaxconn";

/// A host namespace, `n` container namespaces and the state directory.
pub struct Lab {
    pub host: TestNetns,
    pub containers: Vec<TestNetns>,
    pub state: tempfile::TempDir,
}

impl Lab {
    pub fn new(containers: usize) -> Lab {
        let host = TestNetns::with_prefix(PREFIX).unwrap();
        let containers = (0..containers).map(|_| TestNetns::with_prefix(PREFIX).unwrap()).collect();
        let state = tempfile::Builder::new().prefix("ks-state-").tempdir().unwrap();
        let mut nl = host.netlink().unwrap();
        nl.add_veth(&VethSpec { link: LinkSpec::new(MACVLAN_MASTER), peer: LinkSpec::new("ksm1") }).unwrap();
        for name in [MACVLAN_MASTER, "ksm1"] {
            let link = nl.require_link(name).unwrap();
            nl.set_link_up(link.index).unwrap();
        }
        Lab { host, containers, state }
    }

    /// Replaces container namespace `i` by a fresh one, as a runtime discards a sandbox
    /// whose set-up or tear-down failed: what was left in it goes with it.
    pub fn replace_container(&mut self, i: usize) {
        self.containers[i] = TestNetns::with_prefix(PREFIX).unwrap();
    }

    pub fn dir(&self, what: &str) -> PathBuf {
        self.state.path().join(what)
    }

    /// Everything: host and container namespaces, and every file of the state directory.
    pub fn snapshot(&self) -> BTreeSet<String> {
        let mut lines: BTreeSet<String> =
            host_state::netns_lines(&self.host, &[]).into_iter().map(|l| format!("host {l}")).collect();
        for (i, ctr) in self.containers.iter().enumerate() {
            lines.extend(
                host_state::netns_lines(ctr, &[TUNED_SYSCTL]).into_iter().map(|l| format!("ctr{i} {l}")),
            );
        }
        lines.extend(host_state::file_lines(self.state.path()));
        lines
    }

    /// The lab's state once links being deleted in the background are gone: two equal
    /// snapshots in a row with no veth but the macvlan master's pair and no IFB.
    pub fn settled_snapshot(&self) -> BTreeSet<String> {
        let transient =
            |l: &String| (l.contains("kind=veth") && !l.contains(" ksm")) || l.contains("kind=ifb");
        let mut last = BTreeSet::new();
        crate::common::eventually("links deleted in the background to go", || {
            let now = self.snapshot();
            let stable = now == last && !now.iter().any(transient);
            last = now;
            stable
        });
        last
    }

    /// Waits until the lab's state equals `baseline` (see [`host_state::assert_settles_to`]).
    pub fn assert_back_to(&self, what: &str, baseline: &BTreeSet<String>) {
        host_state::assert_settles_to(what, baseline, || self.snapshot());
    }
}

/// One plugin of a chain: its type and its configuration (without prevResult).
#[derive(Debug, Clone)]
pub struct Step {
    pub plugin: &'static str,
    pub conf: Value,
}

/// A host-local IPAM section on `subnet`, keeping its files in the lab.
fn ipam(lab: &Lab, subnet: &str) -> Value {
    json!({"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": lab.dir("ipam")})
}

fn step(plugin: &'static str, mut conf: Value) -> Step {
    conf["cniVersion"] = json!(VERSION);
    conf["name"] = json!(NETWORK);
    conf["type"] = json!(plugin);
    Step { plugin, conf }
}

/// The interface plugin of every chain: bridge (isGateway, ipMasq) + host-local.
pub fn bridge(lab: &Lab) -> Step {
    step(
        "bridge",
        json!({"bridge": "ksbr0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
        "ipam": ipam(lab, "10.66.0.0/24")}),
    )
}

pub fn ptp(lab: &Lab) -> Step {
    step("ptp", json!({"ipMasq": true, "ipam": ipam(lab, "10.67.0.0/24")}))
}

pub fn macvlan(lab: &Lab) -> Step {
    step("macvlan", json!({"master": MACVLAN_MASTER, "mode": "bridge", "ipam": ipam(lab, "10.68.0.0/24")}))
}

pub fn tap(lab: &Lab) -> Step {
    step("tap", json!({"ipam": ipam(lab, "10.69.0.0/24")}))
}

/// portmap with one mapping; `port` differs between attachments alive together.
pub fn portmap(port: u16) -> Step {
    step(
        "portmap",
        json!({"snat": true,
        "runtimeConfig": {"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]}}),
    )
}

pub fn firewall() -> Step {
    step("firewall", json!({"backend": "nftables"}))
}

pub fn tuning(lab: &Lab) -> Step {
    step("tuning", json!({"dataDir": lab.dir("tuning"), "mtu": 1400, "sysctl": {TUNED_SYSCTL: "777"}}))
}

pub fn bandwidth() -> Step {
    step(
        "bandwidth",
        json!({"ingressRate": 8_000_000, "ingressBurst": 80_000,
        "egressRate": 16_000_000, "egressBurst": 160_000}),
    )
}

pub fn sbr() -> Step {
    step("sbr", json!({}))
}

/// The device host-device moves: a veth end in the host namespace with a non-default MTU,
/// up (its peer stays behind). Named ksm* so the lab tells it from transient veths.
pub const HOST_DEVICE: &str = "ksmd0";

pub fn host_device(lab: &Lab) -> Step {
    let mut nl = lab.host.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new(HOST_DEVICE), peer: LinkSpec::new("ksmd1") }).unwrap();
    for name in [HOST_DEVICE, "ksmd1"] {
        let link = nl.require_link(name).unwrap();
        nl.set_link_mtu(link.index, 1450).unwrap();
        nl.set_link_up(link.index).unwrap();
    }
    step(
        "host-device",
        json!({"device": HOST_DEVICE, "dataDir": lab.dir("host-device"), "ipam": ipam(lab, "10.70.0.0/24")}),
    )
}

/// bridge with static IPAM: the address comes from the configuration, nothing on disk.
pub fn bridge_static() -> Step {
    step(
        "bridge",
        json!({"bridge": "ksbr1", "isGateway": true,
        "ipam": {"type": "static", "addresses": [{"address": "10.72.0.2/24", "gateway": "10.72.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]}}),
    )
}

pub fn loopback() -> Step {
    step("loopback", json!({}))
}

/// One attachment: a container ID in container namespace `container` of the lab.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub id: String,
    pub container: usize,
}

impl Attachment {
    /// `verb` of `step` for this attachment, run in the lab's host namespace, with
    /// `prev` as prevResult when given.
    pub fn call(&self, lab: &Lab, step: &Step, verb: &str, prev: Option<&Value>) -> PluginCall {
        let mut conf = step.conf.clone();
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        call(step.plugin, verb, &lab.host, Some(&lab.containers[self.container]), &conf)
            .container_id(&self.id)
    }

    /// ADD of `chain[..upto]` in order, each with the previous result; panics on failure.
    pub fn add_upto(&self, lab: &Lab, chain: &[Step], upto: usize) -> Option<Value> {
        let mut prev: Option<Value> = None;
        for step in &chain[..upto] {
            let out = self.call(lab, step, "ADD", prev.as_ref()).run();
            prev = Some(expect_ok(&format!("ADD {} {}", step.plugin, self.id), &out).unwrap());
        }
        prev
    }

    /// DEL of the whole chain in reverse, as a runtime does after a failed ADD (no
    /// prevResult) or with the cached result; every DEL must succeed.
    pub fn del_all(&self, lab: &Lab, chain: &[Step], prev: Option<&Value>) {
        for step in chain.iter().rev() {
            let out = self.call(lab, step, "DEL", prev).run();
            expect_ok(&format!("DEL {} {}", step.plugin, self.id), &out);
        }
    }
}

/// GC of every plugin of `chain` with `valid` as the valid attachments; must succeed.
pub fn gc_all(lab: &Lab, chain: &[Step], valid: &[Attachment]) {
    let valid: Vec<Value> = valid.iter().map(|a| json!({"containerID": a.id, "ifname": "eth0"})).collect();
    for step in chain {
        let mut conf = step.conf.clone();
        conf["cni.dev/valid-attachments"] = json!(valid);
        let out = call(step.plugin, "GC", &lab.host, None, &conf).run();
        expect_ok(&format!("GC {}", step.plugin), &out);
    }
}

/// The printed JSON of a successful run (`None` for a verb that prints nothing);
/// panics with everything the plugin said otherwise.
pub fn expect_ok(what: &str, out: &PluginOutput) -> Option<Value> {
    assert!(out.success(), "{what} failed ({}): {}\nstderr: {}", out.status, out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).ok()
}

/// The multi-call binary's bin directory (for a runtime's CNI_PATH).
pub fn bin_dir() -> &'static Path {
    plugin_dir()
}
