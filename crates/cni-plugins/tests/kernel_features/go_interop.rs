//! Interop with the Go reference plugins in the kernel rig: our libcni runs Debian's
//! containernetworking-plugins (1.1.1, `/usr/lib/cni`: ipvlan, vlan, vrf and the static
//! IPAM plugin; that release has no `dummy`, added upstream later) and ours with the same
//! configuration, each in a container of its own, and the results, the containers'
//! kernel state after ADD and after DEL, and CHECK must agree.
//!
//! Each side gets its own master device on the host: two VLAN links with one id on one
//! parent, or two IPvlan links with one address on one parent, cannot coexist.

use crate::common::plugin_dir;
use crate::ip;
use cni_testkit::kernel_rig::require_rig;
use cni_testkit::ns::{HostAndContainers, TestNetns};
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::{json, Value};
use std::path::Path;

const PREFIX: &str = "vrg";
const GO_PLUGINS: &str = "/usr/lib/cni";

/// The interface plugin's configuration: `kind` on `master` with one static address and
/// one extra route. The route names its gateway: Go 1.1.1's CHECK expects a route
/// without `gw` to have none in the kernel, while its static IPAM installs it via the
/// address's gateway, so its own CHECK would fail on its own ADD.
fn interface_conf(kind: &str, master: &str, subnet: u8) -> Value {
    let mut conf = json!({"type": kind, "master": master, "mtu": 1400,
        "ipam": {"type": "static",
                 "addresses": [{"address": format!("10.71.{subnet}.2/24"), "gateway": format!("10.71.{subnet}.1")}],
                 "routes": [{"dst": format!("10.72.{subnet}.0/24"), "gw": format!("10.71.{subnet}.1")}]}});
    match kind {
        "ipvlan" => conf["mode"] = json!("l2"),
        "vlan" => conf["vlanId"] = json!(42),
        _ => unreachable!("{kind}"),
    }
    conf
}

fn list(plugins: Vec<Value>) -> NetworkConfigList {
    let list = json!({"cniVersion": "1.0.0", "name": "interopnet", "plugins": plugins});
    NetworkConfigList::from_bytes(&serde_json::to_vec(&list).unwrap()).unwrap()
}

/// One side of the comparison: a plugin directory, a container, a master on the host.
struct Side<'a> {
    plugins: &'a Path,
    container: &'a TestNetns,
    master: &'static str,
}

impl Side<'_> {
    fn cni(&self, cache: &Path) -> CniConfig {
        CniConfig::new([self.plugins]).with_cache_dir(cache)
    }

    fn runtime(&self) -> RuntimeConf {
        RuntimeConf::new(self.container.name(), self.container.path().to_str().unwrap(), "eth0")
    }
}

/// The result with what legitimately differs between the sides blanked: MACs (the
/// master's, random) and the namespace path.
fn normalised_result(mut result: Value) -> Value {
    for iface in result["interfaces"].as_array_mut().into_iter().flatten() {
        iface.as_object_mut().unwrap().remove("mac");
        if iface.get("sandbox").is_some() {
            iface["sandbox"] = json!("<container>");
        }
    }
    // An empty `dns` object and an absent one say the same.
    if result.get("dns").is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty())) {
        result.as_object_mut().unwrap().remove("dns");
    }
    result
}

/// The container's IPv4 state as the kernel reports it: each link (kind, MTU, up, master,
/// VLAN id, IPvlan mode, VRF table; not its MAC or parent, which differ by side), each
/// IPv4 address, each IPv4 route of every table.
fn kernel_state(c: &TestNetns) -> Value {
    let links: Vec<Value> = c
        .ip_json(&["-d", "link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let data = &l["linkinfo"]["info_data"];
            json!({"name": l["ifname"], "kind": l["linkinfo"]["info_kind"], "mtu": l["mtu"],
                "up": l["flags"].as_array().unwrap().contains(&json!("UP")), "master": l["master"],
                "vlan": data["id"], "mode": data["mode"], "table": data["table"]})
        })
        .collect();
    let addresses: Vec<Value> = c
        .ip_json(&["-4", "addr", "show"])
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| {
            let name = l["ifname"].clone();
            l["addr_info"].as_array().unwrap().iter().map(move |a| {
                json!({"dev": name, "address": format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"])})
            })
        })
        .collect();
    let mut routes: Vec<Value> = c
        .ip_json(&["-4", "route", "show", "table", "all"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            json!({"table": r["table"], "dst": r["dst"], "gateway": r["gateway"], "dev": r["dev"],
                "type": r["type"], "protocol": r["protocol"], "scope": r["scope"]})
        })
        .collect();
    routes.sort_by_key(|r| r.to_string());
    json!({"links": links, "addresses": addresses, "routes": routes})
}

/// Runs ADD, CHECK and DEL of `plugins` on both sides through libcni and requires the
/// same result and kernel state; our CHECK must pass, and Go's too unless
/// `go_check_fails_with` names the message of a known failure of Go's own CHECK. With
/// `only_ours_keeps`, our state after ADD has that route (by destination) and Go's lacks
/// it; the rest must agree. Returns our kernel state after ADD for further checks.
fn compare(
    env: &HostAndContainers,
    go: &Side,
    ours: &Side,
    plugins: impl Fn(&str) -> Vec<Value>,
    go_check_fails_with: Option<&str>,
    only_ours_keeps: Option<&str>,
) -> Value {
    let cache = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for side in [go, ours] {
        let (cni, rt, list) = (side.cni(cache.path()), side.runtime(), list(plugins(side.master)));
        let result = env.host.run(|| cni.add_network_list(&list, &rt)).unwrap();
        let result = result.unwrap_or_else(|e| panic!("ADD through {}: {e}", side.plugins.display()));
        let after_add = kernel_state(side.container);
        let checked = env.host.run(|| cni.check_network_list(&list, &rt)).unwrap().map_err(|e| e.to_string());
        env.host
            .run(|| cni.del_network_list(&list, &rt))
            .unwrap()
            .unwrap_or_else(|e| panic!("DEL through {}: {e}", side.plugins.display()));
        let after_del = kernel_state(side.container);
        seen.push((normalised_result(result.json), after_add, after_del, checked));
    }
    let (go_seen, our_seen) = (&seen[0], &seen[1]);
    assert_eq!(our_seen.0, go_seen.0, "results differ (left ours, right Go)");
    let mut ours_after_add = our_seen.1.clone();
    if let Some(dst) = only_ours_keeps {
        let routes = ours_after_add["routes"].as_array_mut().unwrap();
        let before = routes.len();
        routes.retain(|r| r["dst"] != dst);
        assert_eq!(routes.len() + 1, before, "our ADD kept no route to {dst} (or several): {}", our_seen.1);
    }
    assert_eq!(ours_after_add, go_seen.1, "kernel state after ADD differs (left ours, right Go)");
    assert_eq!(our_seen.2, go_seen.2, "kernel state after DEL differs (left ours, right Go)");
    our_seen.3.as_ref().expect("our CHECK");
    match (go_check_fails_with, &go_seen.3) {
        (None, checked) => checked.as_ref().map(drop).expect("Go's CHECK"),
        (Some(known), Err(e)) => assert!(e.contains(known), "Go's CHECK failed otherwise: {e}"),
        (Some(known), Ok(())) => panic!("Go's CHECK passed, though it was known to fail with {known:?}"),
    }
    our_seen.1.clone()
}

/// Host, two containers (Go's, ours), a dummy master for each side on the host.
fn setup() -> HostAndContainers {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    for master in ["vrgm0", "vrrm0"] {
        ip(&env.host, &["link", "add", master, "type", "dummy"]);
        ip(&env.host, &["link", "set", master, "up"]);
    }
    env
}

fn sides(env: &HostAndContainers) -> (Side<'_>, Side<'_>) {
    (
        Side { plugins: Path::new(GO_PLUGINS), container: &env.containers[0], master: "vrgm0" },
        Side { plugins: plugin_dir(), container: &env.containers[1], master: "vrrm0" },
    )
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn ipvlan_matches_go() {
    require_rig();
    let env = setup();
    let (go, ours) = sides(&env);
    let state = compare(&env, &go, &ours, |master| vec![interface_conf("ipvlan", master, 1)], None, None);
    assert!(
        state["links"].as_array().unwrap().iter().any(|l| l["kind"] == "ipvlan" && l["mode"] == "l2"),
        "{state}"
    );
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn vlan_matches_go() {
    require_rig();
    let env = setup();
    let (go, ours) = sides(&env);
    let state = compare(&env, &go, &ours, |master| vec![interface_conf("vlan", master, 2)], None, None);
    assert!(
        state["links"].as_array().unwrap().iter().any(|l| l["kind"] == "vlan" && l["vlan"] == 42),
        "{state}"
    );
}

#[test]
#[ignore = "needs the kernel rig: run by kernel_rig_runs_the_kernel_feature_tests"]
fn vrf_chain_matches_go() {
    require_rig();
    let env = setup();
    let (go, ours) = sides(&env);
    // Go's ipvlan CHECK looks for the gateway's route in the main table, where the VRF
    // no longer leaves it: a chain with vrf never passes Go's CHECK.
    let plugins = |master: &str| {
        vec![interface_conf("ipvlan", master, 3), json!({"type": "vrf", "vrfname": "red", "table": 1234})]
    };
    // Go 1.1.1's vrf leaves the interface's IPAM route behind: the kernel flushes it when
    // the interface joins the VRF, and only later releases move it to the VRF's table, as
    // ours does. Everything else must be the same.
    let state =
        compare(&env, &go, &ours, plugins, Some("Failed to find Gateway 10.71.3.1"), Some("10.72.3.0/24"));
    let links = state["links"].as_array().unwrap();
    assert!(links.iter().any(|l| l["kind"] == "vrf" && l["table"] == 1234), "{state}");
    assert!(links.iter().any(|l| l["name"] == "eth0" && l["master"] == "red"), "{state}");
    let moved = json!({"table": "1234", "dst": "10.72.3.0/24", "gateway": "10.71.3.1", "dev": "eth0",
        "type": null, "protocol": null, "scope": null});
    assert!(state["routes"].as_array().unwrap().contains(&moved), "{state}");
}
