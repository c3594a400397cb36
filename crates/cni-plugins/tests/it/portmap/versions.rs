//! `portmap` bookkeeping: GC, every spec version, errors. Traffic is tested in
//! `portmap.rs`; here the plugin only needs container addresses, so most calls get a
//! made-up prevResult instead of real interfaces.

use super::support;
use crate::common;

use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_testkit::ns::TestNetns;
use common::{call, ok};
use serde_json::json;
use support::{conf, per_container_parts, prev_result};

const PREFIX: &str = "cnm";

#[test]
fn gc_removes_only_invalid_attachments_of_its_network() {
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    let add = |network: &str, id: &str, port: u16, address: &str| {
        let mut c = conf("1.1.0", port, Some(prev_result(&ctr, address)));
        c["name"] = json!(network);
        ok(call("portmap", "ADD", &host, Some(&ctr), &c).container_id(id).run());
    };
    add("pmscale", "keep", 8001, "10.202.0.2/24");
    add("pmscale", "stale", 8002, "10.202.0.3/24");
    add("othernet", "stale", 8003, "10.203.0.3/24");
    let gc = json!({"cniVersion": "1.1.0", "name": "pmscale", "type": "portmap",
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]});
    ok(call("portmap", "GC", &host, None, &gc).run());
    let text = host.nft_text();
    assert!(text.contains("tcp . 8001") && text.contains("tcp . 8003"), "{text}");
    assert!(!text.contains("8002"), "{text}");
    assert_eq!(per_container_parts(&host), (2, 2));
}

#[test]
fn every_spec_version_and_errors() {
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let ctr = TestNetns::with_prefix(PREFIX).unwrap();
    let versions = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
    for (i, version) in versions.iter().enumerate() {
        let address = format!("10.204.0.{}/24", i + 2);
        let prev = if version.starts_with("0.1") || version.starts_with("0.2") {
            json!({"cniVersion": version, "ip4": {"ip": address}})
        } else {
            let mut p = prev_result(&ctr, &address);
            p["cniVersion"] = json!(version);
            if version.starts_with("0.") {
                p["ips"][0]["version"] = json!("4");
            }
            p
        };
        let c = conf(version, 9000 + i as u16, Some(prev.clone()));
        let out = call("portmap", "ADD", &host, Some(&ctr), &c).run().json();
        assert_eq!(out["cniVersion"], *version);
        let text = host.nft_text();
        assert!(text.contains(&format!("dnat ip to 10.204.0.{}:80", i + 2)), "{version}: {text}");
        let check = call("portmap", "CHECK", &host, Some(&ctr), &c).run();
        if version.starts_with("0.1") || version.starts_with("0.2") || version.starts_with("0.3") {
            assert_eq!(check.error().code, 1, "CHECK needs 0.4.0");
        } else {
            ok(check);
        }
        ok(call("portmap", "DEL", &host, Some(&ctr), &c).run());
    }
    assert_eq!(per_container_parts(&host), (0, 0));

    // 1.0.0 without prevResult: portmap only works chained.
    let err = call("portmap", "ADD", &host, Some(&ctr), &conf("1.0.0", 9100, None)).run().error();
    assert_eq!(err.code, 7);
    // 0.2.0 without prevResult: the addresses are read from the container's interface.
    let mut nl = host.netlink().unwrap();
    let peer = LinkSpec::new("eth0").netns(ctr.netns());
    nl.add_veth(&VethSpec { link: LinkSpec::new("cnmv0"), peer }).unwrap();
    let mut inside = ctr.netlink().unwrap();
    let eth0 = inside.require_link("eth0").unwrap();
    inside.add_address(eth0.index, "10.205.0.2/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    inside.set_link_up(eth0.index).unwrap();
    let out = call("portmap", "ADD", &host, Some(&ctr), &conf("0.2.0", 9101, None)).run().json();
    assert_eq!(out["ip4"]["ip"], "10.205.0.2/24");
    let text = host.nft_text();
    assert!(text.contains("dnat ip to 10.205.0.2:80"), "{text}");
    ok(call("portmap", "DEL", &host, Some(&ctr), &conf("0.2.0", 9101, None)).run());

    // STATUS answers; a conflicting host port is refused with a clear message.
    let status = json!({"cniVersion": "1.1.0", "name": "pmscale", "type": "portmap"});
    ok(call("portmap", "STATUS", &host, None, &status).run());
    let first = conf("1.1.0", 9200, Some(prev_result(&ctr, "10.206.0.2/24")));
    ok(call("portmap", "ADD", &host, Some(&ctr), &first).container_id("one").run());
    let second = conf("1.1.0", 9200, Some(prev_result(&ctr, "10.206.0.3/24")));
    let err = call("portmap", "ADD", &host, Some(&ctr), &second).container_id("two").run().error();
    assert!(err.msg.contains("9200") && err.msg.contains("already mapped"), "{}", err.msg);
    assert_eq!(per_container_parts(&host), (1, 1), "the failed ADD left nothing behind");
}
