//! A container that plays IPv6 router towards the host (CVE-2020-10749): radvd (Debian
//! package `radvd`) on the container's interface advertises a global prefix (autonomous)
//! and itself as default router to ff02::1. A host-side link CNI made must learn nothing
//! from it. Used by the bridge and ptp tests.

use cni_testkit::ns::TestNetns;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The prefix the container advertises.
pub const PREFIX: &str = "2001:db8:1::/64";
/// What every address SLAAC would make from it starts with (`ip` prints it so).
const PREFIX_START: &str = "2001:db8:1:";

/// A running radvd; killed and reaped on drop (a panicking test too).
pub struct Router {
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sysctl(ns: &TestNetns, key: &str, value: &str) {
    cni_net::sysctl::write_in(ns.netns(), key, value).unwrap();
}

/// IPv6 on in the test's host namespace, on links made later too: without it there is
/// nothing an advertisement could change, and a test would pass for the wrong reason.
pub fn enable_ipv6(host: &TestNetns) {
    for scope in ["all", "default"] {
        sysctl(host, &format!("net/ipv6/conf/{scope}/disable_ipv6"), "0");
    }
}

/// radvd in `container` on `ifname`, advertising [`PREFIX`] (on-link, autonomous) and a
/// default router lifetime of 1800 s every 3-4 s (its minimum interval).
pub fn advertise(container: &TestNetns, ifname: &str) -> Router {
    assert!(
        Path::new("/usr/sbin/radvd").exists(),
        "/usr/sbin/radvd is missing: install the Debian package radvd"
    );
    // radvd refuses to advertise from a namespace that does not forward.
    sysctl(container, "net/ipv6/conf/all/forwarding", "1");
    let dir = tempfile::Builder::new().prefix("ra-radvd").tempdir().unwrap();
    let conf = dir.path().join("radvd.conf");
    std::fs::write(
        &conf,
        format!(
            "interface {ifname} {{\n  AdvSendAdvert on;\n  MinRtrAdvInterval 3;\n  MaxRtrAdvInterval 4;\n  \
             AdvDefaultLifetime 1800;\n  prefix {PREFIX} {{ AdvOnLink on; AdvAutonomous on; }};\n}};\n"
        ),
    )
    .unwrap();
    let conf = conf.display().to_string();
    let pid = dir.path().join("radvd.pid").display().to_string();
    let log = std::fs::File::create(dir.path().join("radvd.log")).unwrap();
    let child = container
        .command("/usr/sbin/radvd")
        .args(["-n", "-C", &conf, "-p", &pid, "-m", "stderr"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start radvd");
    Router { child: Some(child), _dir: dir }
}

/// How many router advertisements `link` in `host` has received, by the kernel's own
/// per-interface count (made before accept_ra is consulted, so it counts the ignored ones).
fn advertisements_received(host: &TestNetns, link: &str) -> u64 {
    let out = host.command("cat").arg(format!("/proc/net/dev_snmp6/{link}")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("Icmp6InRouterAdvertisements"))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

/// Waits until `link` has received two advertisements: the first has then been processed
/// in full (addresses and routes are made as it is received), so what it could do is done.
pub fn wait_for_advertisements(host: &TestNetns, link: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while advertisements_received(host, link) < 2 {
        assert!(Instant::now() < deadline, "{link} received no router advertisement within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the advertisements planted in `host`: IPv6 default routes and addresses in
/// [`PREFIX`], as `ip` prints them. Empty is the only right answer.
pub fn planted(host: &TestNetns) -> Vec<String> {
    let mut found = Vec::new();
    for route in host.ip_json(&["-6", "route", "show", "default"]).as_array().unwrap() {
        found.push(format!("default route {route}"));
    }
    for link in host.ip_json(&["-6", "addr", "show"]).as_array().unwrap() {
        for addr in link["addr_info"].as_array().unwrap() {
            if addr["local"].as_str().is_some_and(|a| a.starts_with(PREFIX_START)) {
                found.push(format!("address {} on {}", addr["local"], link["ifname"]));
            }
        }
    }
    found
}

/// `net.ipv6.conf.<link>.accept_ra` in `host`.
pub fn accept_ra(host: &TestNetns, link: &str) -> String {
    cni_net::sysctl::read_in(host.netns(), &format!("net/ipv6/conf/{link}/accept_ra")).unwrap()
}
