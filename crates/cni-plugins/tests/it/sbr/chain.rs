//! The chain a runtime runs: `bridge` (with `static` IPAM) → `tuning` → `sbr`, each given
//! the previous plugin's result, then DEL in reverse order with the final result, as
//! libcni does. Names are prefixed `cnu`.

use crate::common;

use cni_net::netlink::IpFamily;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::PluginCall;
use cni_testkit::traffic::udp_echo_server;
use serde_json::{json, Value};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const IFNAME: &str = "cnu0";

fn plugins() -> Vec<Value> {
    vec![
        json!({"type": "bridge", "bridge": "cnubr0", "isGateway": true,
            "ipam": {"type": "static", "addresses": [{"address": "10.81.0.2/24", "gateway": "10.81.0.1"}],
                "routes": [{"dst": "0.0.0.0/0"}]}}),
        json!({"type": "tuning", "mtu": 1400, "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}}),
        json!({"type": "sbr"}),
    ]
}

fn run(
    host: &TestNetns,
    ctr: &TestNetns,
    verb: &str,
    plugin: &Value,
    data_dir: &std::path::Path,
    prev: Option<&Value>,
) -> Value {
    let mut conf = plugin.clone();
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("cnu-chain");
    conf["dataDir"] = json!(data_dir);
    if let Some(prev) = prev {
        conf["prevResult"] = prev.clone();
    }
    let name = plugin["type"].as_str().unwrap();
    let out = PluginCall::new(common::plugin(name), verb)
        .netns(ctr.path())
        .ifname(IFNAME)
        .config(&conf)
        .in_namespace(host.path())
        .run();
    assert!(out.success(), "{name} {verb}: {out:?}");
    if verb == "ADD" {
        serde_json::from_str(&out.stdout).unwrap()
    } else {
        Value::Null
    }
}

#[test]
fn bridge_tuning_sbr_chain_adds_checks_and_deletes() {
    let host = TestNetns::with_prefix("cnu").unwrap();
    let ctr = TestNetns::with_prefix("cnu").unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let mut result: Option<Value> = None;
    for plugin in plugins() {
        result = Some(run(&host, &ctr, "ADD", &plugin, data_dir.path(), result.as_ref()));
    }
    let result = result.unwrap();
    for plugin in plugins() {
        run(&host, &ctr, "CHECK", &plugin, data_dir.path(), Some(&result));
    }

    let mut nl = ctr.netlink().unwrap();
    let link = nl.require_link(IFNAME).unwrap();
    assert_eq!(link.mtu, 1400);
    let rules: Vec<_> = nl.rules(IpFamily::V4).unwrap().into_iter().filter(|r| r.from.is_some()).collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].from.unwrap().to_string(), "10.81.0.2/32");
    let table = rules[0].table;
    assert!(table >= 100);

    // From the container's address, traffic to the bridge's gateway address flows.
    let server = udp_echo_server(host.netns(), "10.81.0.1:0".parse().unwrap()).unwrap();
    let socket = ctr.run(|| UdpSocket::bind("10.81.0.2:0".parse::<SocketAddr>().unwrap())).unwrap().unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    socket.send_to(b"cnu", server.local_addr()).unwrap();
    let mut buf = [0u8; 8];
    let (n, _) = socket.recv_from(&mut buf).expect("echo through the sbr table");
    assert_eq!(&buf[..n], b"cnu");

    for plugin in plugins().iter().rev() {
        run(&host, &ctr, "DEL", plugin, data_dir.path(), Some(&result));
    }
    let mut nl = ctr.netlink().unwrap();
    assert!(nl.rules(IpFamily::V4).unwrap().iter().all(|r| r.from.is_none()), "sbr rules removed");
    assert!(nl.routes(IpFamily::V4, Some(table)).unwrap().is_empty(), "sbr table emptied");
    assert!(nl.link_by_name(IFNAME).unwrap().is_none(), "bridge removed the container interface");
}
