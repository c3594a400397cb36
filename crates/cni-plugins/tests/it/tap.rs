//! `tap` on the real kernel: a persistent tap in the container, optionally a port of a
//! bridge there; a test thread attaches to it the way a VM monitor would and exchanges
//! frames with the bridge.

use crate::common;

use cni_net::netlink::{attach_tun, AddressFlags, BridgeOptions, IpFamily, LinkKind, LinkSpec, TunSpec};
use cni_testkit::ns::{HostAndContainers, TestNetns};
use common::{add, call, ok};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

const PREFIX: &str = "cnt";

fn conf(version: &str) -> Value {
    json!({"cniVersion": version, "name": "tapnet", "type": "tap"})
}

/// Attaches to the persistent tap `name` in `ns`, as QEMU does, from a thread inside the
/// namespace. The fd keeps working outside it.
fn attach(ns: &TestNetns, name: &str, multi_queue: bool) -> cni_net::Result<File> {
    let spec = TunSpec { multi_queue, ..TunSpec::tap(name) };
    ns.run(|| attach_tun(&spec)).unwrap()
}

/// Sends `frame` into the tap and reads frames until `wanted` matches one (or 5 s pass).
/// The frame is sent again every 100 ms: the bridge drops what arrives before the kernel
/// has seen the port's carrier come up (the attach turns it on, and link events are
/// processed asynchronously).
fn exchange(tap: &mut File, frame: &[u8], wanted: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut buf = vec![0u8; 2048];
    while std::time::Instant::now() < deadline {
        tap.write_all(frame).unwrap();
        if cni_os::poll::readable(&*tap, std::time::Duration::from_millis(100)).unwrap() {
            let n = tap.read(&mut buf).unwrap();
            if wanted(&buf[..n]) {
                return Some(buf[..n].to_vec());
            }
        }
    }
    None
}

/// An Ethernet broadcast ARP request from 02:00:00:00:00:09 / `from` for `target`.
fn arp_request(from: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mac = [2, 0, 0, 0, 0, 9];
    let mut frame = vec![0xff; 6];
    frame.extend(mac);
    frame.extend([0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    frame.extend(mac);
    frame.extend(from);
    frame.extend([0; 6]);
    frame.extend(target);
    frame
}

#[test]
fn a_vm_side_attaches_and_exchanges_frames_with_the_bridge() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut nl = c.netlink().unwrap();
    let br = nl.add_bridge(&LinkSpec::new("br0"), &BridgeOptions::default()).unwrap().unwrap();
    nl.add_address(br.index, "10.94.0.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    nl.set_link_up(br.index).unwrap();
    let mut conf = conf("1.1.0");
    conf["bridge"] = json!("br0");
    conf["mtu"] = json!(1400);
    let r = add("tap", &env.host, c, &conf);
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][0]["sandbox"], c.path().display().to_string());
    assert_eq!(r["interfaces"][0]["mtu"], 1400);

    let eth0 = nl.require_link("eth0").unwrap();
    assert_eq!(
        (eth0.kind.clone(), eth0.master, eth0.up, eth0.mtu),
        (LinkKind::Tun, Some(br.index), true, 1400)
    );
    assert_eq!(r["interfaces"][0]["mac"], eth0.mac.unwrap().to_string());

    // The "VM" asks the bridge's address by ARP through the tap; the bridge answers.
    let mut tap = attach(c, "eth0", false).unwrap();
    let request = arp_request([10, 94, 0, 9], [10, 94, 0, 1]);
    let reply = exchange(&mut tap, &request, |f| f.len() >= 42 && f[12..14] == [8, 6] && f[20..22] == [0, 2]);
    let reply = reply.expect("no ARP reply from the bridge through the tap");
    assert_eq!(&reply[0..6], &[2, 0, 0, 0, 0, 9]);
    assert_eq!(&reply[28..32], &[10, 94, 0, 1]);

    conf["prevResult"] = r;
    ok(call("tap", "CHECK", &env.host, Some(c), &conf).run());
    nl.set_link_nomaster(eth0.index).unwrap();
    let err = call("tap", "CHECK", &env.host, Some(c), &conf).run().error();
    assert!(err.msg.contains("br0"), "{}", err.msg);
    drop(tap);
    ok(call("tap", "DEL", &env.host, Some(c), &conf).run());
    assert!(nl.link_by_name("eth0").unwrap().is_none());
}

#[test]
fn multi_queue_owner_group_and_mac_are_applied() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut conf = conf("1.0.0");
    conf["multiQueue"] = json!(true);
    conf["owner"] = json!(1234);
    conf["group"] = json!(5678);
    conf["runtimeConfig"] = json!({"mac": "c2:11:22:33:44:55"});
    conf["selinuxContext"] = json!("system_u:system_r:container_t:s0");
    let out = call("tap", "ADD", &env.host, Some(c), &conf).run();
    let r = out.json();
    assert_eq!(r["interfaces"][0]["mac"], "c2:11:22:33:44:55");
    if !Path::new("/sys/fs/selinux/enforce").exists() {
        assert!(out.stderr.contains("selinuxContext"), "no log line: {}", out.stderr);
    }
    let detail = c.ip_json(&["-d", "link", "show", "dev", "eth0"]);
    let info = &detail[0]["linkinfo"]["info_data"];
    assert_eq!(info["type"], "tap", "{detail}");
    assert_eq!(
        (info["multi_queue"].clone(), info["persist"].clone()),
        (json!(true), json!(true)),
        "{detail}"
    );
    assert_eq!((info["user"].clone(), info["group"].clone()), (json!(1234), json!(5678)), "{detail}");
    // Two queues can attach; a single-queue attach is refused.
    let _q1 = attach(c, "eth0", true).unwrap();
    let _q2 = attach(c, "eth0", true).unwrap();
    assert!(attach(c, "eth0", false).is_err());
}

#[test]
fn with_ipam_the_tap_carries_the_addresses() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let mut conf = conf("0.4.0");
    conf["ipam"] = json!({"type": "static", "addresses": [{"address": "10.95.0.2/24"}]});
    let r = add("tap", &env.host, c, &conf);
    assert_eq!(r["ips"][0]["address"], "10.95.0.2/24");
    let mut nl = c.netlink().unwrap();
    let eth0 = nl.require_link("eth0").unwrap();
    let addrs: Vec<String> = nl
        .addresses(Some(eth0.index), Some(IpFamily::V4))
        .unwrap()
        .iter()
        .map(|a| a.address.to_string())
        .collect();
    assert_eq!(addrs, ["10.95.0.2/24"]);
    assert_eq!(cni_net::sysctl::read_in(c.netns(), "net.ipv4.conf.eth0.arp_notify").unwrap().trim(), "1");
    conf["prevResult"] = r;
    ok(call("tap", "CHECK", &env.host, Some(c), &conf).run());
    nl.delete_address(eth0.index, "10.95.0.2/24".parse().unwrap()).unwrap();
    assert!(call("tap", "CHECK", &env.host, Some(c), &conf).run().error().msg.contains("10.95.0.2/24"));
    for _ in 0..2 {
        ok(call("tap", "DEL", &env.host, Some(c), &conf).run());
    }
    ok(call("tap", "DEL", &env.host, Some(c), &conf).unset("CNI_NETNS").run());
    assert!(nl.link_by_name("eth0").unwrap().is_none());
}

#[test]
fn every_verb_in_every_version_family() {
    let env = HostAndContainers::with_prefix(PREFIX, 6).unwrap();
    for (i, version) in ["0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"].iter().enumerate() {
        let c = &env.containers[i];
        let mut conf = conf(version);
        let address = format!("10.96.0.{}/24", 10 + i);
        conf["ipam"] = json!({"type": "static", "addresses": [{"address": address}]});
        let r = add("tap", &env.host, c, &conf);
        assert_eq!(r["cniVersion"], *version);
        match *version {
            "0.1.0" | "0.2.0" => assert_eq!(r["ip4"]["ip"], address),
            "0.3.1" | "0.4.0" => assert_eq!(r["ips"][0]["version"], "4"),
            _ => assert!(r["ips"][0].get("version").is_none()),
        }
        conf["prevResult"] = r;
        let check = call("tap", "CHECK", &env.host, Some(c), &conf).run();
        if ["0.1.0", "0.2.0", "0.3.1"].contains(version) {
            assert_eq!(check.error().code, 1, "CHECK at {version}");
        } else {
            ok(check);
        }
        for verb in ["GC", "STATUS"] {
            let out = call("tap", verb, &env.host, None, &conf).run();
            if *version == "1.1.0" {
                ok(out);
            } else {
                assert_eq!(out.error().code, 1, "{verb} at {version}");
            }
        }
        ok(call("tap", "DEL", &env.host, Some(c), &conf).run());
        assert!(c.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
    }
}

#[test]
fn bad_input_gets_the_right_code_and_leaves_nothing() {
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let c = &env.containers[0];
    let links = || {
        let mut names: Vec<String> =
            c.netlink().unwrap().links().unwrap().into_iter().map(|l| l.name).collect();
        names.sort();
        names
    };
    for (key, value, code, names) in [
        ("bridge", json!("nosuchbr"), 7, "nosuchbr"),
        ("mtu", json!(20), 7, "mtu"),
        ("mac", json!("zz"), 7, "MAC"),
        ("owner", json!(-1), 7, "owner"),
    ] {
        let mut conf = conf("1.0.0");
        conf[key] = value;
        let err = call("tap", "ADD", &env.host, Some(c), &conf).run().error();
        assert_eq!(err.code, code, "{key}: {}", err.msg);
        assert!(err.msg.contains(names), "{}", err.msg);
        assert_eq!(links(), ["lo"]);
    }
    // Name taken; and IPAM failing after the tap exists: both roll the tap back.
    let mut nl = c.netlink().unwrap();
    nl.add_bridge(&LinkSpec::new("eth0"), &BridgeOptions::default()).unwrap();
    let err = call("tap", "ADD", &env.host, Some(c), &conf("1.0.0")).run().error();
    assert!(err.msg.contains("eth0") && err.msg.contains("already"), "{}", err.msg);
    assert_eq!(links(), ["eth0", "lo"]);
    let mut bad_ipam = conf("1.0.0");
    bad_ipam["ipam"] =
        json!({"type": "static", "addresses": [{"address": "10.97.0.2/24", "gateway": "fd00::1"}]});
    assert!(!call("tap", "ADD", &env.host, Some(c), &bad_ipam).ifname("tap1").run().success());
    assert_eq!(links(), ["eth0", "lo"]);
}
