//! `macvlan` on the real kernel. A veth pair stands in for the host's NIC: its host end
//! (`mvm0`, carrying 10.91.0.1/24) is the master, its other end (`lan0`, 10.91.0.254/24)
//! sits in a "LAN" namespace standing in for the rest of the segment.

use crate::common;

use cni_net::netlink::{
    AddressFlags, IpFamily, LinkKind, LinkSpec, MacvlanMode, Neighbour, NeighbourState, Route, VethSpec,
};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use common::{add, call, ok};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const PREFIX: &str = "cnm";
const MASTER: &str = "mvm0";

struct Lab {
    env: HostAndContainers,
    lan: TestNetns,
}

/// Host + `n` containers + the LAN, with the master up and addressed on both sides.
fn lab(n: usize) -> Lab {
    let env = HostAndContainers::with_prefix(PREFIX, n).unwrap();
    let lan = TestNetns::with_prefix(PREFIX).unwrap();
    let mut host = env.host.netlink().unwrap();
    host.add_veth(&VethSpec { link: LinkSpec::new(MASTER), peer: LinkSpec::new("lan0").netns(lan.netns()) })
        .unwrap();
    let master = host.require_link(MASTER).unwrap();
    host.add_address(master.index, "10.91.0.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    host.set_link_up(master.index).unwrap();
    // The LAN learns new addresses from gratuitous ARPs (off by default).
    cni_net::sysctl::write_in(lan.netns(), "net.ipv4.conf.lan0.arp_accept", "1").unwrap();
    cni_net::sysctl::disable_ipv6_dad(lan.netns(), "lan0").unwrap();
    let mut lan_nl = lan.netlink().unwrap();
    let lan0 = lan_nl.require_link("lan0").unwrap();
    lan_nl.add_address(lan0.index, "10.91.0.254/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    lan_nl.add_address(lan0.index, "fd91::fe/64".parse().unwrap(), AddressFlags::Nodad).unwrap();
    lan_nl.set_link_up(lan0.index).unwrap();
    Lab { env, lan }
}

fn conf(version: &str, mode: &str, address: &str) -> Value {
    json!({"cniVersion": version, "name": "mvnet", "type": "macvlan", "master": MASTER, "mode": mode,
        "ipam": {"type": "static", "addresses": [{"address": address}]}})
}

fn echo(from: &TestNetns, to: &TestNetns, addr: &str) -> Result<(), String> {
    let addr: SocketAddr = addr.parse().unwrap();
    let _server = tcp_echo_server(to.netns(), addr).unwrap();
    // Short: the negative cases wait this long for nothing.
    tcp_echo(from.netns(), addr, b"over macvlan", Duration::from_secs(2)).map_err(|e| e.to_string())
}

/// DEL takes the macvlan out of service at once and leaves its deletion to a helper.
fn wait_clean(ns: &TestNetns) {
    common::eventually("the macvlan is still there", || leftover_links(ns).is_empty());
}

fn leftover_links(ns: &TestNetns) -> Vec<String> {
    ns.netlink().unwrap().links().unwrap().into_iter().map(|l| l.name).filter(|n| n != "lo").collect()
}

#[test]
fn bridge_mode_containers_talk_to_each_other_and_the_lan_but_not_the_master() {
    let lab = lab(2);
    let (a, b) = (&lab.env.containers[0], &lab.env.containers[1]);
    let ra = add("macvlan", &lab.env.host, a, &conf("1.1.0", "bridge", "10.91.0.2/24"));
    add("macvlan", &lab.env.host, b, &conf("1.1.0", "bridge", "10.91.0.3/24"));
    assert_eq!(ra["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(ra["interfaces"][0]["name"], "eth0");
    assert_eq!(ra["interfaces"][0]["sandbox"], a.path().display().to_string());
    assert_eq!(ra["ips"][0], json!({"interface": 0, "address": "10.91.0.2/24"}));

    // Kernel state: a bridge-mode macvlan whose parent is the master in the host namespace.
    let master = lab.env.host.netlink().unwrap().require_link(MASTER).unwrap();
    let mut cont = a.netlink().unwrap();
    let eth0 = cont.require_link("eth0").unwrap();
    assert_eq!(eth0.kind, LinkKind::Macvlan);
    assert!(eth0.up);
    assert_eq!((eth0.link, eth0.link_netnsid.is_some()), (Some(master.index), true));
    assert_eq!(cont.macvlan_mode(eth0.index).unwrap(), Some(MacvlanMode::Bridge));
    assert_eq!(ra["interfaces"][0]["mac"], eth0.mac.unwrap().to_string());
    assert_eq!(ra["interfaces"][0]["mtu"], master.mtu);

    // As the reference: later link or MAC changes are announced by the kernel too.
    for key in ["net.ipv4.conf.eth0.arp_notify", "net.ipv6.conf.eth0.ndisc_notify"] {
        assert_eq!(cni_net::sysctl::read_in(a.netns(), key).unwrap().trim(), "1", "{key}");
    }
    // The gratuitous ARP reached the LAN before any traffic did.
    let lan_neigh = lab.lan.netlink().unwrap().neighbours(IpFamily::V4, None).unwrap();
    assert!(
        lan_neigh.iter().any(|n| n.address.to_string() == "10.91.0.2" && n.mac == eth0.mac),
        "no gratuitous ARP seen: {lan_neigh:?}"
    );

    echo(a, b, "10.91.0.3:7201").unwrap();
    echo(a, &lab.lan, "10.91.0.254:7202").unwrap();
    // A macvlan never reaches its own master's address: frames go out, not up the stack.
    assert!(echo(a, &lab.env.host, "10.91.0.1:7203").is_err());
}

#[test]
fn private_mode_isolates_containers_on_one_master() {
    let lab = lab(2);
    let (a, b) = (&lab.env.containers[0], &lab.env.containers[1]);
    add("macvlan", &lab.env.host, a, &conf("1.0.0", "private", "10.91.0.2/24"));
    add("macvlan", &lab.env.host, b, &conf("1.0.0", "private", "10.91.0.3/24"));
    let mut cont = b.netlink().unwrap();
    let eth0 = cont.require_link("eth0").unwrap();
    assert_eq!(cont.macvlan_mode(eth0.index).unwrap(), Some(MacvlanMode::Private));
    echo(a, &lab.lan, "10.91.0.254:7204").unwrap();
    assert!(echo(a, b, "10.91.0.3:7205").is_err());
}

#[test]
fn ipv6_takeover_is_announced_with_an_unsolicited_neighbour_advertisement() {
    let lab = lab(1);
    let c = &lab.env.containers[0];
    // The LAN still remembers the address at a previous owner's MAC.
    let mut lan = lab.lan.netlink().unwrap();
    let lan0 = lan.require_link("lan0").unwrap();
    let old_owner = Neighbour {
        index: lan0.index,
        address: "fd91::2".parse().unwrap(),
        mac: Some("c2:de:ad:00:00:01".parse().unwrap()),
        state: NeighbourState::Stale,
    };
    lan.replace_neighbour(&old_owner).unwrap();
    let r = add("macvlan", &lab.env.host, c, &conf("1.0.0", "vepa", "fd91::2/64"));
    let mac = r["interfaces"][0]["mac"].as_str().unwrap().to_string();
    let neigh = lan.neighbours(IpFamily::V6, Some(lan0.index)).unwrap();
    let entry = neigh.iter().find(|n| n.address == old_owner.address).expect("entry kept");
    assert_eq!(entry.mac.map(|m| m.to_string()), Some(mac), "the override NA did not update it");
    echo(c, &lab.lan, "[fd91::fe]:7206").unwrap();
}

#[test]
fn master_defaults_to_the_default_route_interface_and_its_absence_is_code_7() {
    let lab = lab(1);
    let c = &lab.env.containers[0];
    let mut no_master = conf("1.0.0", "bridge", "10.91.0.2/24");
    no_master.as_object_mut().unwrap().remove("master");
    let err = call("macvlan", "ADD", &lab.env.host, Some(c), &no_master).run().error();
    assert_eq!(err.code, 7, "{}", err.msg);
    assert!(err.msg.contains("master") && err.msg.contains("default route"), "{}", err.msg);
    assert!(leftover_links(c).is_empty());

    let mut host = lab.env.host.netlink().unwrap();
    host.add_route(&Route::default_route(IpFamily::V4).gateway("10.91.0.254".parse().unwrap())).unwrap();
    add("macvlan", &lab.env.host, c, &no_master);
    let eth0 = c.netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!(eth0.link, Some(host.require_link(MASTER).unwrap().index));
    echo(c, &lab.lan, "10.91.0.254:7207").unwrap();
}

#[test]
fn mtu_mac_and_bcqueuelen_are_applied_and_an_mtu_over_the_masters_is_refused() {
    let lab = lab(3);
    let mut c = conf("1.0.0", "bridge", "10.91.0.2/24");
    c["mtu"] = json!(1400);
    c["bcqueuelen"] = json!(123);
    c["runtimeConfig"] = json!({"mac": "c2:11:22:33:44:55"});
    let r = add("macvlan", &lab.env.host, &lab.env.containers[0], &c);
    assert_eq!(r["interfaces"][0]["mac"], "c2:11:22:33:44:55");
    let eth0 = lab.env.containers[0].netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!((eth0.mtu, eth0.mac.unwrap().to_string()), (1400, "c2:11:22:33:44:55".to_string()));
    let detail = lab.env.containers[0].ip_json(&["-d", "link", "show", "dev", "eth0"]);
    assert_eq!(detail[0]["linkinfo"]["info_data"]["bcqueuelen"], 123, "{detail}");

    // MAC from CNI_ARGS; the config's own "mac" is the lowest precedence.
    let mut c2 = conf("1.0.0", "bridge", "10.91.0.3/24");
    c2["mac"] = json!("c2:00:00:00:00:99");
    ok(call("macvlan", "ADD", &lab.env.host, Some(&lab.env.containers[1]), &c2)
        .args("IgnoreUnknown=1;MAC=c2:00:00:00:00:07")
        .run());
    let eth0 = lab.env.containers[1].netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!(eth0.mac.unwrap().to_string(), "c2:00:00:00:00:07");

    let mut too_big = conf("1.0.0", "bridge", "10.91.0.4/24");
    too_big["mtu"] = json!(9000);
    let err = call("macvlan", "ADD", &lab.env.host, Some(&lab.env.containers[2]), &too_big).run().error();
    assert_eq!(err.code, 7);
    assert!(err.msg.contains("MTU"), "{}", err.msg);
    assert!(leftover_links(&lab.env.containers[2]).is_empty());
}

#[test]
fn without_ipam_the_link_is_up_without_addresses() {
    let lab = lab(1);
    let c = &lab.env.containers[0];
    let l2 = json!({"cniVersion": "1.0.0", "name": "mvnet", "type": "macvlan", "master": MASTER});
    let r = add("macvlan", &lab.env.host, c, &l2);
    assert!(r.get("ips").is_none_or(|ips| ips.as_array().unwrap().is_empty()), "{r}");
    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    assert!(eth0.up);
    let global: Vec<_> =
        nl.addresses(Some(eth0.index), None).unwrap().into_iter().filter(|a| a.scope == 0).collect();
    assert!(global.is_empty(), "{global:?}");
    let mut check = l2.clone();
    check["prevResult"] = r;
    ok(call("macvlan", "CHECK", &lab.env.host, Some(c), &check).run());
    ok(call("macvlan", "DEL", &lab.env.host, Some(c), &l2).run());
    wait_clean(c);
}

#[test]
fn link_in_container_uses_a_master_inside_the_container() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut nl = c.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new("inner0"), peer: LinkSpec::new("inner1") }).unwrap();
    for name in ["inner0", "inner1"] {
        let link = nl.require_link(name).unwrap();
        nl.set_link_up(link.index).unwrap();
    }
    let mut conf = conf("1.0.0", "bridge", "10.92.0.2/24");
    conf["master"] = json!("inner0");
    conf["linkInContainer"] = json!(true);
    let r = add("macvlan", &env.host, c, &conf);
    let eth0 = nl.require_link("eth0").unwrap();
    assert_eq!((eth0.link, eth0.link_netnsid), (Some(nl.require_link("inner0").unwrap().index), None));
    conf["prevResult"] = r;
    ok(call("macvlan", "CHECK", &env.host, Some(c), &conf).run());
    // Without linkInContainer the master is looked for on the host, where it is not.
    conf["linkInContainer"] = json!(false);
    assert_eq!(call("macvlan", "CHECK", &env.host, Some(c), &conf).run().error().code, 7);
    conf["linkInContainer"] = json!(true);
    ok(call("macvlan", "DEL", &env.host, Some(c), &conf).run());
    assert!(nl.link_by_name("eth0").unwrap().is_none());
}

#[test]
fn every_verb_in_every_version_family() {
    let lab = lab(6);
    let versions = ["0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    for (i, version) in versions.iter().enumerate() {
        let c = &lab.env.containers[i];
        let address = format!("10.91.0.{}/24", 10 + i);
        let mut conf = conf(version, "bridge", &address);
        let r = add("macvlan", &lab.env.host, c, &conf);
        assert_eq!(r["cniVersion"], *version);
        match *version {
            "0.1.0" | "0.2.0" => {
                assert_eq!(r["ip4"]["ip"], address);
                assert!(r.get("interfaces").is_none());
            }
            "0.3.1" | "0.4.0" => {
                assert_eq!(r["ips"][0]["version"], "4");
                assert!(r["interfaces"][0].get("mtu").is_none());
            }
            _ => assert!(r["ips"][0].get("version").is_none()),
        }
        let check = call("macvlan", "CHECK", &lab.env.host, Some(c), &{
            conf["prevResult"] = r.clone();
            conf.clone()
        })
        .run();
        if ["0.1.0", "0.2.0", "0.3.1"].contains(version) {
            assert_eq!(check.error().code, 1, "CHECK at {version}");
        } else {
            ok(check);
        }
        for verb in ["GC", "STATUS"] {
            let out = call("macvlan", verb, &lab.env.host, None, &conf).run();
            if *version == "1.1.0" {
                ok(out);
            } else {
                assert_eq!(out.error().code, 1, "{verb} at {version}");
            }
        }
        ok(call("macvlan", "DEL", &lab.env.host, Some(c), &conf).run());
        wait_clean(c);
    }
    let version =
        call("macvlan", "VERSION", &lab.env.host, None, &json!({"cniVersion": "1.1.0"})).run().json();
    assert_eq!(version["supportedVersions"].as_array().unwrap().len(), 7);
}

#[test]
fn check_finds_tampering_and_del_is_idempotent() {
    let lab = lab(1);
    let c = &lab.env.containers[0];
    let mut conf = conf("1.0.0", "bridge", "10.91.0.2/24");
    conf["prevResult"] = add("macvlan", &lab.env.host, c, &conf);
    ok(call("macvlan", "CHECK", &lab.env.host, Some(c), &conf).run());
    let mut other_mode = conf.clone();
    other_mode["mode"] = json!("vepa");
    let err = call("macvlan", "CHECK", &lab.env.host, Some(c), &other_mode).run().error();
    assert!(err.msg.contains("mode"), "{}", err.msg);
    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    nl.delete_address(eth0.index, "10.91.0.2/24".parse().unwrap()).unwrap();
    let err = call("macvlan", "CHECK", &lab.env.host, Some(c), &conf).run().error();
    assert!(err.msg.contains("10.91.0.2/24"), "{}", err.msg);
    for _ in 0..2 {
        ok(call("macvlan", "DEL", &lab.env.host, Some(c), &conf).run());
    }
    ok(call("macvlan", "DEL", &lab.env.host, Some(c), &conf).unset("CNI_NETNS").run());
    wait_clean(c);
}

fn host_local(data_dir: &Path, version: &str) -> Value {
    json!({"cniVersion": version, "name": "mvhl", "type": "macvlan", "master": MASTER,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.91.0.0/24", "rangeStart": "10.91.0.100"}]],
                 "dataDir": data_dir}})
}

/// host-local's reservations of the test network.
fn reservations(data_dir: &Path) -> Vec<String> {
    cni_testkit::host_local::reservations(data_dir, "mvhl")
}

#[test]
fn gc_releases_what_the_runtime_no_longer_has_and_del_without_the_netns_frees_the_address() {
    let mut lab = lab(3);
    let data = tempfile::tempdir().unwrap();
    let conf = host_local(data.path(), "1.1.0");
    for c in &lab.env.containers {
        add("macvlan", &lab.env.host, c, &conf);
    }
    assert_eq!(reservations(data.path()).len(), 3);
    ok(call("macvlan", "STATUS", &lab.env.host, None, &conf).run());
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([
        {"containerID": lab.env.containers[0].name(), "ifname": "eth0"},
        {"containerID": lab.env.containers[1].name(), "ifname": "eth0"},
    ]);
    ok(call("macvlan", "GC", &lab.env.host, None, &gc).run());
    assert_eq!(reservations(data.path()).len(), 2);

    // The container's namespace is gone (its macvlan with it); DEL still frees the address.
    let gone = lab.env.containers.remove(0);
    let (id, path) = (gone.name().to_string(), gone.path().to_path_buf());
    drop(gone);
    ok(common::call("macvlan", "DEL", &lab.env.host, None, &conf)
        .container_id(&id)
        .netns(&path)
        .ifname("eth0")
        .run());
    assert_eq!(reservations(data.path()).len(), 1);
}

#[test]
fn bad_input_gets_the_right_code_and_leaves_nothing() {
    let lab = lab(1);
    let c = &lab.env.containers[0];
    let data = tempfile::tempdir().unwrap();
    let base = host_local(data.path(), "1.0.0");
    let with = |key: &str, value: Value| {
        let mut conf = base.clone();
        conf[key] = value;
        conf
    };
    for (conf, code, names) in [
        (with("master", json!("nosuch0")), 7, "nosuch0"),
        (with("mode", json!("l2")), 7, "mode"),
        (with("mode", json!("source")), 2, "mode"),
        (with("mtu", json!(-1)), 7, "mtu"),
        (with("mac", json!("not-a-mac")), 7, "MAC"),
    ] {
        let err = call("macvlan", "ADD", &lab.env.host, Some(c), &conf).run().error();
        assert_eq!(err.code, code, "{conf}: {}", err.msg);
        assert!(err.msg.contains(names), "{}", err.msg);
    }
    // The name is taken in the container: the macvlan and the reservation are rolled back.
    let mut nl = c.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new("eth0"), peer: LinkSpec::new("other0") }).unwrap();
    let err = call("macvlan", "ADD", &lab.env.host, Some(c), &base).run().error();
    assert!(err.msg.contains("eth0") && err.msg.contains("already"), "{}", err.msg);
    let mut links = leftover_links(c);
    links.sort();
    assert_eq!(links, ["eth0", "other0"]);
    assert!(reservations(data.path()).is_empty());
    let host_links = lab.env.host.netlink().unwrap().links().unwrap();
    assert!(host_links.iter().all(|l| l.kind != LinkKind::Macvlan), "{host_links:?}");
}

#[test]
fn drop_in_for_the_go_plugin_each_checks_and_deletes_what_the_other_made() {
    let go = Path::new("/usr/lib/cni/macvlan");
    assert!(go.exists(), "{} is missing: apt-get install -y containernetworking-plugins", go.display());
    let lab = lab(2);
    let go_call = |verb: &str, c: &TestNetns, conf: &Value| {
        cni_testkit::runner::PluginCall::new(go, verb)
            .in_namespace(lab.env.host.path())
            .cni_path(&common::plugin_dir().display().to_string())
            .config(conf)
            .netns(c.path())
            .container_id(c.name())
            .run()
    };
    // Go ADD, our CHECK and DEL.
    let (a, b) = (&lab.env.containers[0], &lab.env.containers[1]);
    let mut conf_a = conf("1.0.0", "private", "10.91.0.2/24");
    conf_a["prevResult"] = go_call("ADD", a, &conf_a).json();
    ok(call("macvlan", "CHECK", &lab.env.host, Some(a), &conf_a).run());
    ok(call("macvlan", "DEL", &lab.env.host, Some(a), &conf_a).run());
    wait_clean(a);
    // Our ADD, Go CHECK and DEL.
    let mut conf_b = conf("1.0.0", "vepa", "10.91.0.3/24");
    conf_b["prevResult"] = add("macvlan", &lab.env.host, b, &conf_b);
    ok(go_call("CHECK", b, &conf_b));
    ok(go_call("DEL", b, &conf_b));
    assert!(leftover_links(b).is_empty());
}
