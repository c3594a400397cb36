//! The reference's plugins#160: an interface addressed by an IPAM plugin other than
//! `slaac` must not also take addresses from router advertisements, which its result would
//! not name. A router advertises on the host-side bridge; the container is attached with
//! host-local (IPv4, then IPv6 in the advertised prefix). The test waits until the
//! container has processed an advertisement (it learnt the default route, which stays
//! on), then requires that no address was autoconfigured. The Go reference's bridge, under
//! the same conditions, shows the problem.

use super::support;
use crate::common;

use cni_testkit::ns::TestNetns;
use common::add;
use serde_json::{json, Value};
use support::*;

fn host_local(subnet: &str, dir: &std::path::Path) -> Value {
    json!({"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": dir})
}

/// The global addresses on eth0 other than `expected`.
fn unexpected_addresses(container: &TestNetns, expected: &[&str]) -> Vec<String> {
    global_addresses(container, "eth0")
        .iter()
        .map(|a| a["local"].as_str().unwrap().to_string())
        .filter(|a| !expected.contains(&a.as_str()))
        .collect()
}

fn attach_and_wait(ipam: Value, expected_v6: Option<&str>) {
    cni_testkit::ns::require_root();
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let result = add("bridge", host, container, &bridge_conf(ipam));
    wait_for_advertisement(container);
    let expected: Vec<&str> = expected_v6.into_iter().collect();
    assert_eq!(unexpected_addresses(container, &expected), Vec::<String>::new(), "{result}");
    let autoconf = cni_net::sysctl::read_in(container.netns(), "net/ipv6/conf/eth0/autoconf").unwrap();
    assert_eq!(autoconf, "0");
}

#[test]
fn host_local_ipv4_attachment_takes_no_router_address() {
    let dir = tempfile::Builder::new().prefix("sl-ipam").tempdir().unwrap();
    attach_and_wait(host_local("10.51.0.0/24", dir.path()), None);
}

#[test]
fn host_local_ipv6_attachment_keeps_only_its_allocated_address() {
    let dir = tempfile::Builder::new().prefix("sl-ipam").tempdir().unwrap();
    let ipam = json!({"type": "host-local", "ranges": [[{"subnet": BRIDGE_PREFIX, "rangeStart": "2001:db8:51::100",
        "rangeEnd": "2001:db8:51::100"}]], "dataDir": dir.path()});
    attach_and_wait(ipam, Some("2001:db8:51::100"));
}

/// The contrast, proving the test above can fail: the Go reference's bridge leaves
/// `autoconf` on, and the interface gains an address from the advertised prefix.
#[test]
fn the_reference_bridge_lets_the_interface_take_a_router_address() {
    cni_testkit::ns::require_root();
    let go_bridge = std::path::Path::new("/usr/lib/cni/bridge");
    assert!(go_bridge.exists(), "install the Debian package containernetworking-plugins");
    let lan = bridge_lan(1, Some(&plain_router(BRIDGE_PREFIX)));
    let (host, container) = (&lan.env.host, &lan.env.containers[0]);
    let dir = tempfile::Builder::new().prefix("sl-ipam").tempdir().unwrap();
    let out = cni_testkit::runner::PluginCall::new(go_bridge, "ADD")
        .in_namespace(host.path())
        .cni_path("/usr/lib/cni")
        .config(&{
            let mut conf = bridge_conf(host_local("10.51.0.0/24", dir.path()));
            conf["cniVersion"] = json!("1.0.0");
            conf
        })
        .netns(container.path())
        .container_id(container.name())
        .run();
    common::ok(out);
    wait_for_advertisement(container);
    common::eventually("no router address appeared under the reference bridge", || {
        unexpected_addresses(container, &[]).iter().any(|a| a.starts_with("2001:db8:51:"))
    });
}
