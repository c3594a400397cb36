//! For the slaac tests: a router (radvd, Debian package `radvd`) advertising from a test
//! namespace, on a bridge in the test's host namespace (for `bridge`) or at the far end of
//! a veth whose near end is a macvlan master (for `macvlan`). Every radvd is killed by its
//! guard's Drop, also when a test panics. Names start with "sl".

use crate::common;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub const PREFIX: &str = "sl";
pub const BRIDGE: &str = "slbr0";
pub const MASTER: &str = "slm0";
pub const ROUTER_LINK: &str = "slr0";
/// The bridge's (the router's) global address, in the advertised prefix.
pub const BRIDGE_ROUTER: &str = "2001:db8:51::1";
pub const BRIDGE_PREFIX: &str = "2001:db8:51::/64";
pub const LAN_ROUTER: &str = "2001:db8:52::1";
pub const LAN_PREFIX: &str = "2001:db8:52::/64";

/// A running radvd; killed and reaped on drop.
pub struct Radvd {
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl Drop for Radvd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One prefix option as radvd writes it (`AdvAutonomous` on unless `body` says otherwise).
pub fn prefix(prefix: &str, body: &str) -> String {
    format!("  prefix {prefix} {{ AdvOnLink on; AdvAutonomous on; {body} }};\n")
}

/// radvd on `interface` in `ns`, advertising every 3-4 s (its minimum) with `options`
/// (router-level lines and prefix blocks). Its configuration is checked first, so a test
/// fails on a typo rather than by waiting for an advertisement that never comes.
pub fn radvd(ns: &TestNetns, interface: &str, options: &str) -> Radvd {
    assert!(
        Path::new("/usr/sbin/radvd").exists(),
        "/usr/sbin/radvd is missing: install the Debian package radvd"
    );
    let dir = tempfile::Builder::new().prefix("sl-radvd").tempdir().unwrap();
    let conf = dir.path().join("radvd.conf");
    std::fs::write(
        &conf,
        format!(
            "interface {interface} {{\n  AdvSendAdvert on;\n  MinRtrAdvInterval 3;\n  MaxRtrAdvInterval 4;\n{options}}};\n"
        ),
    )
    .unwrap();
    let conf = conf.display().to_string();
    let check = ns.command("/usr/sbin/radvd").args(["-c", "-C", &conf]).output().unwrap();
    assert!(check.status.success(), "radvd -c: {}", String::from_utf8_lossy(&check.stderr));
    let pid = dir.path().join("radvd.pid").display().to_string();
    let log = std::fs::File::create(dir.path().join("radvd.log")).unwrap();
    let child = ns
        .command("/usr/sbin/radvd")
        .args(["-n", "-C", &conf, "-p", &pid, "-m", "stderr"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start radvd");
    Radvd { child: Some(child), _dir: dir }
}

pub fn run_ip(ns: &TestNetns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn sysctl(ns: &TestNetns, key: &str, value: &str) {
    cni_net::sysctl::write_in(ns.netns(), key, value).unwrap();
}

/// A router link in `ns`: forwarding on (radvd insists), no DAD, `address` on it, up.
fn router_link(ns: &TestNetns, link: &str, address: &str) {
    sysctl(ns, "net/ipv6/conf/all/forwarding", "1");
    sysctl(ns, &format!("net/ipv6/conf/{link}/accept_dad"), "0");
    run_ip(ns, &["addr", "add", &format!("{address}/64"), "dev", link, "nodad"]);
    run_ip(ns, &["link", "set", link, "up"]);
}

/// The host namespace's bridge as the router: `n` containers, the bridge carrying
/// [`BRIDGE_ROUTER`], radvd on it with `options` when given.
pub struct BridgeLan {
    pub env: HostAndContainers,
    /// Held for its drop: radvd runs as long as the LAN lives.
    _radvd: Option<Radvd>,
}

pub fn bridge_lan(n: usize, options: Option<&str>) -> BridgeLan {
    let env = HostAndContainers::with_prefix(PREFIX, n).unwrap();
    // A pinned MAC and a port of its own from the start: a bridge's MAC and carrier
    // otherwise follow its ports, and a test comparing before and after would see those.
    run_ip(&env.host, &["link", "add", BRIDGE, "address", "02:00:00:00:51:01", "type", "bridge"]);
    run_ip(&env.host, &["link", "add", "slp0", "type", "veth", "peer", "name", "slp1"]);
    for port in ["slp0", "slp1"] {
        run_ip(&env.host, &["link", "set", port, "addrgenmode", "none"]);
        run_ip(&env.host, &["link", "set", port, "up"]);
    }
    run_ip(&env.host, &["link", "set", "slp0", "master", BRIDGE]);
    router_link(&env.host, BRIDGE, BRIDGE_ROUTER);
    let radvd = options.map(|o| radvd(&env.host, BRIDGE, o));
    BridgeLan { env, _radvd: radvd }
}

/// radvd's options for a plain router advertising `prefix` and being the default router.
pub fn plain_router(advertised: &str) -> String {
    format!("  AdvDefaultLifetime 1800;\n{}", prefix(advertised, ""))
}

pub fn bridge_conf(ipam: Value) -> Value {
    json!({"cniVersion": "1.1.0", "name": "slnet", "type": "bridge", "bridge": BRIDGE, "ipam": ipam})
}

/// A LAN namespace at the far end of the macvlan master's veth, as the router.
pub struct MacvlanLan {
    pub env: HostAndContainers,
    pub lan: TestNetns,
    /// Held for its drop: radvd runs as long as the LAN lives.
    _radvd: Radvd,
}

pub fn macvlan_lan(n: usize, options: &str) -> MacvlanLan {
    let env = HostAndContainers::with_prefix(PREFIX, n).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    let lan_path = lan.path().display().to_string();
    run_ip(
        &env.host,
        &["link", "add", MASTER, "type", "veth", "peer", "name", ROUTER_LINK, "netns", &lan_path],
    );
    run_ip(&env.host, &["link", "set", MASTER, "up"]);
    router_link(&lan, ROUTER_LINK, LAN_ROUTER);
    let radvd = radvd(&lan, ROUTER_LINK, options);
    MacvlanLan { env, lan, _radvd: radvd }
}

pub fn macvlan_conf(ipam: Value) -> Value {
    json!({"cniVersion": "1.1.0", "name": "slnet", "type": "macvlan", "master": MASTER, "mode": "bridge",
        "ipam": ipam})
}

/// A snapshot of `scope` once two in a row agree: the rig's links are new, and their
/// link-local addresses and routes are still coming.
pub fn settled(scope: &cni_testkit::snapshot::Scope<'_>) -> cni_testkit::snapshot::Snapshot {
    let mut before = scope.take();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = scope.take();
        if now.diff(&before).is_empty() {
            return now;
        }
        before = now;
    }
}

/// `ip -j -6 addr` entries of `dev` in `ns` with global scope.
pub fn global_addresses(ns: &TestNetns, dev: &str) -> Vec<Value> {
    let links = ns.ip_json(&["-6", "addr", "show", "dev", dev, "scope", "global"]);
    let entries =
        links.as_array().unwrap().iter().flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default());
    // `ip -j -6` prints an empty object for each address of the other family.
    entries.filter(|a| a.get("local").is_some()).collect()
}

/// The IPv6 default routes of `ns`.
pub fn default_routes(ns: &TestNetns) -> Vec<Value> {
    ns.ip_json(&["-6", "route", "show", "default"]).as_array().unwrap().clone()
}

/// Waits (up to [`common::EVENTUALLY`]) until `ns` has learnt a default route from an
/// advertisement: proof that one arrived and was processed.
pub fn wait_for_advertisement(ns: &TestNetns) {
    let deadline = Instant::now() + common::EVENTUALLY;
    while !default_routes(ns).iter().any(|r| r["protocol"] == "ra") {
        assert!(
            Instant::now() < deadline,
            "no router advertisement reached {} in {:?}",
            ns.name(),
            common::EVENTUALLY
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
