//! `bridge` on the real kernel, in throwaway namespaces: the host namespace holds the bridge,
//! each container namespace its veth end.

use crate::common;
mod host_links;
mod host_local;
use cni_net::netlink::{IpFamily, LinkKind};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, eventually, ok, wait_link_gone};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const PREFIX: &str = "cnb";

fn conf(version: &str, bridge: &str, addresses: Value) -> Value {
    json!({"cniVersion": version, "name": "testnet", "type": "bridge", "bridge": bridge,
        "isGateway": true, "ipam": {"type": "static", "addresses": addresses, "routes": [{"dst": "0.0.0.0/0"}]}})
}

fn echo(from: &TestNetns, to: &TestNetns, addr: &str) {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    tcp_echo(from.netns(), addr, b"hello over the bridge", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("no echo from {addr}: {e}"));
}

#[test]
fn two_containers_talk_through_the_bridge_and_reach_the_gateway() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let ra = add("bridge", &env.host, a, &conf("1.0.0", "cnb0", json!([{"address": "10.66.0.2/24"}])));
    add("bridge", &env.host, b, &conf("1.0.0", "cnb0", json!([{"address": "10.66.0.3/24"}])));

    // Result shape: bridge, host veth, container veth; address on interface 2 with gateway.
    assert_eq!(ra["interfaces"].as_array().unwrap().len(), 3);
    assert_eq!(ra["interfaces"][0]["name"], "cnb0");
    assert_eq!(ra["interfaces"][2]["name"], "eth0");
    assert_eq!(ra["interfaces"][2]["sandbox"], a.path().display().to_string());
    assert_eq!(ra["ips"][0], json!({"interface": 2, "address": "10.66.0.2/24", "gateway": "10.66.0.1"}));

    // Kernel state, read back by netlink: the bridge carries the gateway, the host end is on it.
    let mut host = env.host.netlink().unwrap();
    let bridge = host.require_link("cnb0").unwrap();
    assert_eq!(bridge.kind, LinkKind::Bridge);
    let gw: Vec<String> = host
        .addresses(Some(bridge.index), Some(IpFamily::V4))
        .unwrap()
        .iter()
        .map(|a| a.address.to_string())
        .collect();
    assert_eq!(gw, ["10.66.0.1/24"]);
    let host_veth = host.require_link(ra["interfaces"][1]["name"].as_str().unwrap()).unwrap();
    assert_eq!(host_veth.master, Some(bridge.index));
    let mut cont = a.netlink().unwrap();
    let eth0 = cont.require_link("eth0").unwrap();
    assert!(eth0.up);
    assert_eq!(eth0.mac.unwrap().to_string(), ra["interfaces"][2]["mac"].as_str().unwrap());
    let routes = cont.routes(IpFamily::V4, None).unwrap();
    assert!(
        routes.iter().any(|r| r.is_default() && r.gateway == Some("10.66.0.1".parse().unwrap())),
        "{routes:?}"
    );

    // Real traffic: container to container, and container to the gateway on the host.
    echo(a, b, "10.66.0.3:7001");
    echo(a, &env.host, "10.66.0.1:7002");
}

#[test]
fn dual_stack_traffic_without_waiting_for_dad() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let c = |addr4: &str, addr6: &str| {
        let mut c = conf("1.0.0", "cnb6", json!([{"address": addr4}, {"address": addr6}]));
        c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]);
        c
    };
    let r = add("bridge", &env.host, a, &c("10.67.0.2/24", "fd67::2/64"));
    // The container's and the gateway's addresses skip DAD (usable at once, nothing for
    // ADD to wait for), rather than being made and waited for until they leave DAD.
    let global6 = |ns: &TestNetns, dev: &str| -> Vec<Value> {
        let shown = ns.ip_json(&["-6", "addr", "show", "dev", dev]);
        let addresses = shown[0]["addr_info"].as_array().unwrap().clone();
        addresses.into_iter().filter(|a| a["scope"] == "global").collect()
    };
    for (ns, dev, address) in [(a, "eth0", "fd67::2"), (&env.host, "cnb6", "fd67::1")] {
        let addresses = global6(ns, dev);
        let found = addresses.iter().find(|x| x["local"] == address);
        let found = found.unwrap_or_else(|| panic!("{address} not on {dev}: {addresses:?}"));
        assert_eq!(found["nodad"], true, "{address} on {dev} goes through DAD: {found}");
        assert!(found.get("tentative").is_none(), "{address} on {dev} is tentative: {found}");
    }
    add("bridge", &env.host, b, &c("10.67.0.3/24", "fd67::3/64"));
    assert_eq!(r["ips"][1]["gateway"], "fd67::1");
    echo(a, b, "[fd67::3]:7003");
    echo(a, &env.host, "[fd67::1]:7004");
    echo(b, a, "10.67.0.2:7005");
}

#[test]
fn a_new_bridge_can_solicit_neighbours_at_once() {
    // The kernel solicits neighbours for forwarded IPv6 packets from the bridge's
    // link-local address; while that is tentative (DAD, 1-2 s after the bridge gains
    // carrier), connections forwarded to a new container fail with EHOSTUNREACH.
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    add("bridge", &env.host, &env.containers[0], &conf("1.0.0", "cnb7", json!([{"address": "fd68::2/64"}])));
    let shown = env.host.ip_json(&["-6", "addr", "show", "dev", "cnb7"]);
    let addresses = shown[0]["addr_info"].as_array().unwrap();
    let link_local: Vec<&Value> = addresses.iter().filter(|a| a["scope"] == "link").collect();
    assert!(!link_local.is_empty(), "no link-local address on the bridge: {shown}");
    assert!(link_local.iter().all(|a| a.get("tentative").is_none()), "tentative right after ADD: {shown}");
    assert!(
        env.host.ip_json(&["-d", "link", "show", "dev", "cnb7"])[0]["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("LOWER_UP")),
        "the bridge has no carrier, so DAD has not even started"
    );
}

#[test]
fn result_shape_per_version_family() {
    let env = HostAndContainers::with_prefix(PREFIX, 3).unwrap();
    let addrs = ["10.68.0.2/24", "10.68.0.3/24", "10.68.0.4/24"];
    for (i, version) in ["0.2.0", "0.4.0", "1.1.0"].iter().enumerate() {
        let r = add(
            "bridge",
            &env.host,
            &env.containers[i],
            &conf(version, "cnbv", json!([{"address": addrs[i]}])),
        );
        assert_eq!(r["cniVersion"], *version);
        match *version {
            "0.2.0" => {
                assert_eq!(r["ip4"]["ip"], addrs[i]);
                assert!(r.get("interfaces").is_none());
            }
            "0.4.0" => assert_eq!(r["ips"][0]["version"], "4"),
            _ => assert!(r["ips"][0].get("version").is_none()),
        }
    }
}

#[test]
fn del_is_idempotent_and_works_without_netns() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let conf = conf("1.0.0", "cnbd", json!([{"address": "10.69.0.2/24"}]));
    let r = add("bridge", &env.host, c, &conf);
    let host_veth = r["interfaces"][1]["name"].as_str().unwrap().to_string();
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).unset("CNI_NETNS").run());
    assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
    wait_link_gone(&env.host, &host_veth);
}

#[test]
fn del_frees_the_name_at_once_and_the_pair_goes_soon_after() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let conf = conf("1.0.0", "cnbr", json!([{"address": "10.69.1.2/24"}]));
    let first = add("bridge", &env.host, c, &conf);
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    // Right after DEL: nothing named eth0, and the container end, if not gone yet, is
    // down under a parking name with no address left in service.
    let mut cont = c.netlink().unwrap();
    assert!(cont.link_by_name("eth0").unwrap().is_none());
    for link in cont.links().unwrap().iter().filter(|l| l.name != "lo") {
        assert!(link.name.starts_with("cnidel") && !link.up, "{link:?}");
    }
    // A re-ADD at once (what `podman network reload` does) gets eth0 again and works.
    let second = add("bridge", &env.host, c, &conf);
    assert_eq!(second["interfaces"][2]["name"], "eth0");
    echo(c, &env.host, "10.69.1.1:7006");
    ok(call("bridge", "DEL", &env.host, Some(c), &conf).run());
    for result in [&first, &second] {
        wait_link_gone(&env.host, result["interfaces"][1]["name"].as_str().unwrap());
    }
    eventually("container ends still there", || cont.links().unwrap().iter().all(|l| l.name == "lo"));
}

#[test]
fn check_finds_tampering_and_says_what() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut conf = conf("1.0.0", "cnbc", json!([{"address": "10.70.0.2/24"}]));
    let r = add("bridge", &env.host, c, &conf);
    conf["prevResult"] = r;
    ok(call("bridge", "CHECK", &env.host, Some(c), &conf).run());

    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    nl.delete_address(eth0.index, "10.70.0.2/24".parse().unwrap()).unwrap();
    let err = call("bridge", "CHECK", &env.host, Some(c), &conf).run().error();
    assert!(err.msg.contains("10.70.0.2/24"), "{}", err.msg);

    nl.delete_link(eth0.index).unwrap();
    let err = call("bridge", "CHECK", &env.host, Some(c), &conf).run().error();
    assert!(err.msg.contains("eth0") && err.msg.contains("missing"), "{}", err.msg);
}

#[test]
fn failed_add_leaves_no_veth_behind() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    // The IPAM plugin fails after the veth pair exists.
    let bad = conf("1.0.0", "cnbf", json!([{"address": "10.71.0.2/24", "gateway": "fd00::1"}]));
    let err = call("bridge", "ADD", &env.host, Some(c), &bad).run().error();
    assert!(err.msg.contains("gateway"), "{}", err.msg);
    let host_links = env.host.netlink().unwrap().links().unwrap();
    assert!(host_links.iter().all(|l| l.kind != LinkKind::Veth), "{host_links:?}");
    assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}

#[test]
fn mtu_mac_hairpin_and_default_gateway() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let mut c = conf("1.0.0", "cnbm", json!([{"address": "10.72.0.2/24"}]));
    c["ipam"]["routes"] = json!([]);
    c["mtu"] = json!(1400);
    c["hairpinMode"] = json!(true);
    c["isDefaultGateway"] = json!(true);
    c["runtimeConfig"] = json!({"mac": "c2:11:22:33:44:55"});
    let r = add("bridge", &env.host, &env.containers[0], &c);
    assert_eq!(r["routes"], json!([{"dst": "0.0.0.0/0", "gw": "10.72.0.1"}]));
    let eth0 = env.containers[0].netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!((eth0.mtu, eth0.mac.unwrap().to_string()), (1400, "c2:11:22:33:44:55".to_string()));
    let mut host = env.host.netlink().unwrap();
    let host_veth = host.require_link(r["interfaces"][1]["name"].as_str().unwrap()).unwrap();
    assert_eq!(host_veth.mtu, 1400);
    let detail = env.host.ip_json(&["-d", "link", "show", "dev", &host_veth.name]);
    assert_eq!(detail[0]["linkinfo"]["info_slave_data"]["hairpin"], true, "{detail}");

    // MAC from CNI_ARGS when runtimeConfig has none.
    let mut c2 = conf("1.0.0", "cnbm", json!([{"address": "10.72.0.3/24"}]));
    c2["ipam"]["routes"] = json!([]);
    ok(call("bridge", "ADD", &env.host, Some(&env.containers[1]), &c2)
        .args("IgnoreUnknown=1;MAC=c2:00:00:00:00:07")
        .run());
    let eth0 = env.containers[1].netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!(eth0.mac.unwrap().to_string(), "c2:00:00:00:00:07");
}

#[test]
fn hairpin_with_promisc_is_refused_with_code_7() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let mut c = conf("1.0.0", "cnbu", json!([]));
    c["hairpinMode"] = json!(true);
    c["promiscMode"] = json!(true);
    assert_eq!(call("bridge", "ADD", &env.host, Some(&env.containers[0]), &c).run().error().code, 7);
}

/// Whether the kernel running this test can switch VLAN filtering on (this machine's
/// cannot; the kernel rig's can), probed on a throwaway bridge in `ns`.
fn kernel_filters_vlans(ns: &TestNetns) -> bool {
    let out =
        ns.command("ip").args(["link", "add", "cnbprobe", "type", "bridge", "vlan_filtering", "1"]).output();
    let supported = out.unwrap().status.success();
    let _ = ns.command("ip").args(["link", "del", "cnbprobe"]).output();
    supported
}

/// Links in `ns` other than `lo`.
fn links_besides_lo(ns: &TestNetns) -> Vec<String> {
    let links = ns.netlink().unwrap().links().unwrap();
    links.into_iter().map(|l| l.name).filter(|n| n != "lo").collect()
}

#[test]
fn vlan_keys_need_a_kernel_that_filters_vlans_and_roll_back_without_one() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let (a, b) = (&env.containers[0], &env.containers[1]);
    let data = tempfile::tempdir().unwrap();
    let with = |keys: Value| {
        let mut c = conf("1.0.0", "cnbv", json!([]));
        c["ipam"] =
            json!({"type": "host-local", "dataDir": data.path(), "ranges": [[{"subnet": "10.73.0.0/24"}]]});
        c.as_object_mut().unwrap().extend(keys.as_object().unwrap().clone());
        c
    };
    let allocations = || {
        let entries = std::fs::read_dir(data.path().join("testnet")).into_iter().flatten().flatten();
        entries.filter(|e| e.file_name().to_string_lossy().parse::<std::net::IpAddr>().is_ok()).count()
    };
    if kernel_filters_vlans(&env.host) {
        // Such a kernel is the rig's business (kernel_bridge_vlan.rs); here only the ADD
        // succeeding with the VLAN on the port is checked.
        let r = add("bridge", &env.host, a, &with(json!({"vlan": 100})));
        let port = r["interfaces"][1]["name"].as_str().unwrap().to_string();
        let shown = env.host.command("bridge").args(["-j", "vlan", "show", "dev", &port]).output().unwrap();
        assert!(String::from_utf8_lossy(&shown.stdout).contains("\"vlan\":100"), "{shown:?}");
        return;
    }
    // No bridge yet: creating it with filtering fails, so nothing is left at all.
    for keys in [json!({"vlan": 100}), json!({"vlanTrunk": [{"minID": 5, "maxID": 9}]})] {
        let err = call("bridge", "ADD", &env.host, Some(a), &with(keys.clone())).run().error();
        assert_eq!(err.code, 999, "{keys}: {}", err.msg);
        assert!(
            err.msg.contains("vlan/vlanTrunk") && err.msg.contains("VLAN filtering"),
            "{keys}: {}",
            err.msg
        );
        assert_eq!(links_besides_lo(&env.host), Vec::<String>::new(), "{keys}");
        assert_eq!(links_besides_lo(a), Vec::<String>::new(), "{keys}");
        assert_eq!(allocations(), 0, "{keys}: an allocation was kept");
    }
    // An existing bridge without filtering: switching it on fails; the bridge stays as it
    // was, with its one port, and the refused ADD leaves no veth and no allocation.
    add("bridge", &env.host, b, &with(json!({})));
    let before = links_besides_lo(&env.host);
    assert_eq!(before.len(), 2, "{before:?}");
    let err =
        call("bridge", "ADD", &env.host, Some(a), &with(json!({"vlan": 7, "preserveDefaultVlan": true})))
            .run()
            .error();
    assert_eq!(err.code, 999, "{}", err.msg);
    assert!(err.msg.contains("cnbv") && err.msg.contains("VLAN filtering"), "{}", err.msg);
    assert_eq!(links_besides_lo(&env.host), before);
    assert_eq!(links_besides_lo(a), Vec::<String>::new());
    assert_eq!(allocations(), 1, "only b's address is allocated");
}

#[test]
fn bad_vlan_keys_are_refused_with_code_7_naming_them_and_leave_nothing() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let a = &env.containers[0];
    let cases = [
        (json!({"vlan": 4095}), "vlan"),
        (json!({"vlan": -1}), "vlan"),
        (json!({"vlanTrunk": [{"id": 0}]}), "vlanTrunk[0].id"),
        (json!({"vlanTrunk": [{"id": 4095}]}), "vlanTrunk[0].id"),
        (json!({"vlanTrunk": [{"id": 3}, {"minID": 20, "maxID": 10}]}), "vlanTrunk[1]"),
        (json!({"vlanTrunk": [{"minID": 20}]}), "maxID"),
        (json!({"vlanTrunk": [{}]}), "vlanTrunk[0]"),
        (json!({"vlan": 15, "vlanTrunk": [{"minID": 10, "maxID": 20}]}), "overlaps vlan 15"),
        (json!({"vlan": 15, "vlanTrunk": [{"id": 15}]}), "overlaps vlan 15"),
        (json!({"vlan": 4000, "bridge": "cnb-long-name"}), "too long"),
    ];
    for (keys, named) in cases {
        let mut c = conf("1.0.0", "cnbx", json!([{"address": "10.73.1.2/24"}]));
        c.as_object_mut().unwrap().extend(keys.as_object().unwrap().clone());
        for command in ["ADD", "CHECK"] {
            let err = call("bridge", command, &env.host, Some(a), &c).run().error();
            assert_eq!(err.code, 7, "{command} {keys}: {}", err.msg);
            assert!(err.msg.contains(named), "{command} {keys}: {}", err.msg);
        }
        assert_eq!(links_besides_lo(&env.host), Vec::<String>::new(), "{keys}");
        assert_eq!(links_besides_lo(a), Vec::<String>::new(), "{keys}");
    }
}

#[test]
fn gc_and_status_answer() {
    let env = HostAndContainers::with_prefix(PREFIX, 0).unwrap();
    let c = conf("1.1.0", "cnbg", json!([{"address": "10.74.0.2/24"}]));
    ok(call("bridge", "STATUS", &env.host, None, &c).run());
    ok(call("bridge", "GC", &env.host, None, &c).run());
}

#[test]
fn a_taken_container_name_is_refused_and_leaves_nothing() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let first = conf("1.0.0", "cnbt", json!([{"address": "10.74.0.2/24"}]));
    add("bridge", &env.host, c, &first);
    let host_veths = || {
        let links = env.host.netlink().unwrap().links().unwrap();
        links.into_iter().filter(|l| l.kind == LinkKind::Veth).count()
    };
    assert_eq!(host_veths(), 1);
    // Same interface name, another attachment: the name is taken in the container.
    let second = json!({"cniVersion": "1.0.0", "name": "othernet", "type": "bridge", "bridge": "cnbt",
        "ipam": {"type": "static", "addresses": [{"address": "10.74.0.3/24"}]}});
    let err = call("bridge", "ADD", &env.host, Some(c), &second).run().error();
    assert!(err.msg.contains("eth0") && err.msg.contains("already exists"), "{}", err.msg);
    assert_eq!(host_veths(), 1, "the failed ADD left a veth behind");
}

#[test]
fn result_macs_are_the_kernels_with_and_without_a_gateway() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    for (i, gateway) in [true, false].into_iter().enumerate() {
        let bridge = format!("cnbm{i}");
        let mut conf = conf("1.0.0", &bridge, json!([{"address": format!("10.75.{i}.2/24")}]));
        conf["isGateway"] = json!(gateway);
        let r = add("bridge", &env.host, &env.containers[i], &conf);
        let mut host = env.host.netlink().unwrap();
        for (index, name) in [(0, bridge.as_str()), (1, r["interfaces"][1]["name"].as_str().unwrap())] {
            let link = host.link_by_name(name).unwrap().unwrap();
            assert_eq!(r["interfaces"][index]["name"], name);
            assert_eq!(r["interfaces"][index]["mac"], link.mac.unwrap().to_string(), "gateway {gateway}");
        }
    }
}

#[test]
fn configured_dns_wins_over_ipams_and_ipams_is_used_alone() {
    let env = HostAndContainers::with_prefix(PREFIX, 2).unwrap();
    let ipam_dns = json!({"nameservers": ["10.76.0.53"], "search": ["ipam.example"]});
    let configured = json!({"nameservers": ["192.0.2.53"], "domain": "conf.example"});
    let mut both = conf("1.0.0", "cnbd", json!([{"address": "10.76.0.2/24"}]));
    both["ipam"]["dns"] = ipam_dns.clone();
    both["dns"] = configured.clone();
    let r = add("bridge", &env.host, &env.containers[0], &both);
    assert_eq!(r["dns"], configured);
    let mut ipam_only = conf("1.0.0", "cnbd", json!([{"address": "10.76.0.3/24"}]));
    ipam_only["ipam"]["dns"] = ipam_dns.clone();
    let r = add("bridge", &env.host, &env.containers[1], &ipam_only);
    assert_eq!(r["dns"], ipam_dns);
}

#[test]
fn bridge_names_the_kernel_would_refuse_are_code_7_and_create_nothing() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let links_before = env.host.netlink().unwrap().links().unwrap().len();
    for bad in [".", "cn\tb"] {
        let err = call(
            "bridge",
            "ADD",
            &env.host,
            Some(c),
            &conf("1.0.0", bad, json!([{"address": "10.77.0.2/24"}])),
        )
        .run()
        .error();
        assert_eq!(err.code, 7, "{bad:?}: {}", err.msg);
        assert!(err.msg.contains("invalid bridge"), "{bad:?}: {}", err.msg);
        assert_eq!(
            env.host.netlink().unwrap().links().unwrap().len(),
            links_before,
            "{bad:?} created a link"
        );
        assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none(), "{bad:?} made eth0");
    }
}
