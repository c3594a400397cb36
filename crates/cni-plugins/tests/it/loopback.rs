//! `loopback` on the real kernel.

use crate::common;

use cni_testkit::ns::HostAndContainers;
use common::{add, call, ok};
use serde_json::json;

#[test]
fn brings_lo_up_and_down_in_every_version_family() {
    let env = HostAndContainers::with_prefix("cnlo", 1).unwrap();
    let c = &env.containers[0];
    let mut nl = c.netlink().unwrap();
    let lo = nl.require_link("lo").unwrap();
    nl.set_link_down(lo.index).unwrap();
    for version in ["0.2.0", "0.4.0", "1.1.0"] {
        let conf = json!({"cniVersion": version, "name": "lo", "type": "loopback"});
        let r = add("loopback", &env.host, c, &conf);
        assert!(nl.require_link("lo").unwrap().up);
        match version {
            "0.2.0" => assert_eq!(r["ip4"]["ip"], "127.0.0.1/8"),
            _ => {
                assert_eq!(r["interfaces"][0]["name"], "lo");
                assert!(r["ips"].as_array().unwrap().iter().any(|i| i["address"] == "127.0.0.1/8"), "{r}");
            }
        }
        if version != "0.2.0" {
            ok(call("loopback", "CHECK", &env.host, Some(c), &conf).run());
        }
        ok(call("loopback", "DEL", &env.host, Some(c), &conf).run());
        assert!(!nl.require_link("lo").unwrap().up);
        if version != "0.2.0" {
            assert!(call("loopback", "CHECK", &env.host, Some(c), &conf).run().error().msg.contains("down"));
        }
        ok(call("loopback", "DEL", &env.host, Some(c), &conf).unset("CNI_NETNS").run());
    }
}
