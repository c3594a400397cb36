//! Interop (needs root): libcni drives the Go reference macvlan and host-device plugins
//! (Debian's containernetworking-plugins in /usr/lib/cni) with host-local, in throwaway
//! namespaces: a veth pair stands in for the host's NIC, its far end in a "LAN" namespace.

use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_testkit::ns::TestNetns;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use libcni::{CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const GO_PLUGINS: &str = "/usr/lib/cni";

fn require_go(plugin: &str) {
    assert!(
        Path::new(GO_PLUGINS).join(plugin).exists(),
        "{GO_PLUGINS}/{plugin} is missing: apt-get install -y containernetworking-plugins"
    );
}

/// A host namespace with `nic0` (peer `lan0` in `lan`, addressed `10.93.0.254/24`).
fn host_with_nic(lan: &TestNetns) -> TestNetns {
    let host = TestNetns::with_prefix("cnlm").unwrap();
    let mut nl = host.netlink().unwrap();
    nl.add_veth(&VethSpec { link: LinkSpec::new("nic0"), peer: LinkSpec::new("lan0").netns(lan.netns()) })
        .unwrap();
    let nic = nl.require_link("nic0").unwrap();
    nl.set_link_up(nic.index).unwrap();
    let mut lan_nl = lan.netlink().unwrap();
    let lan0 = lan_nl.require_link("lan0").unwrap();
    lan_nl.add_address(lan0.index, "10.93.0.254/24".parse().unwrap(), AddressFlags::empty()).unwrap();
    lan_nl.set_link_up(lan0.index).unwrap();
    host
}

fn list(version: &str, name: &str, plugin: Value) -> NetworkConfigList {
    let list = json!({"cniVersion": version, "name": name, "plugins": [plugin]});
    NetworkConfigList::from_bytes(&serde_json::to_vec(&list).unwrap()).unwrap()
}

fn lan_echo(ctr: &TestNetns, lan: &TestNetns) {
    let server = tcp_echo_server(lan.netns(), "10.93.0.254:0".parse::<SocketAddr>().unwrap()).unwrap();
    tcp_echo(ctr.netns(), server.local_addr(), b"to the lan", Duration::from_secs(5)).unwrap();
}

#[test]
fn go_macvlan_with_host_local() {
    require_go("macvlan");
    let lan = TestNetns::with_prefix("cnlm").unwrap();
    let host = host_with_nic(&lan);
    let ctr = TestNetns::with_prefix("cnlm").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cni = CniConfig::new([GO_PLUGINS]).with_cache_dir(dir.path().join("cache"));
    for version in ["0.4.0", "1.0.0"] {
        let list = list(
            version,
            "cnl-macvlan",
            json!({"type": "macvlan", "master": "nic0", "mode": "bridge",
                "ipam": {"type": "host-local", "dataDir": dir.path().join("ipam"),
                         "ranges": [[{"subnet": "10.93.0.0/24", "rangeStart": "10.93.0.10"}]]}}),
        );
        let rt = RuntimeConf::new("cnl-macvlan-ctr", ctr.path().display().to_string(), "eth0");
        let added = host.run(|| cni.add_network_list(&list, &rt)).unwrap().unwrap();
        let result = added.parse().unwrap();
        // host-local hands out the next address after the last one (next-fit).
        let address = result.ips[0].address;
        assert!(address.to_string().starts_with("10.93.0.1"), "{address}");
        let reservation = dir.path().join("ipam/cnl-macvlan").join(address.addr().to_string());
        assert!(reservation.exists());
        assert_eq!(result.interfaces[0].name, "eth0");
        let eth0 = ctr.netlink().unwrap().require_link("eth0").unwrap();
        assert_eq!(eth0.kind, cni_net::netlink::LinkKind::Macvlan);
        lan_echo(&ctr, &lan);
        host.run(|| cni.check_network_list(&list, &rt)).unwrap().unwrap();
        host.run(|| cni.del_network_list(&list, &rt)).unwrap().unwrap();
        assert!(ctr.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
        assert!(!reservation.exists());
        host.run(|| cni.del_network_list(&list, &rt)).unwrap().unwrap();
    }
}

#[test]
fn go_host_device_with_host_local() {
    require_go("host-device");
    let lan = TestNetns::with_prefix("cnlm").unwrap();
    let host = host_with_nic(&lan);
    let ctr = TestNetns::with_prefix("cnlm").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cni = CniConfig::new([GO_PLUGINS]).with_cache_dir(dir.path().join("cache"));
    let list = list(
        "1.0.0",
        "cnl-hostdev",
        json!({"type": "host-device", "device": "nic0",
            "ipam": {"type": "host-local", "dataDir": dir.path().join("ipam"),
                     "ranges": [[{"subnet": "10.93.0.0/24", "rangeStart": "10.93.0.20"}]]}}),
    );
    let rt = RuntimeConf::new("cnl-hostdev-ctr", ctr.path().display().to_string(), "eth0");
    let added = host.run(|| cni.add_network_list(&list, &rt)).unwrap().unwrap();
    let result = added.parse().unwrap();
    assert_eq!(result.ips[0].address.to_string(), "10.93.0.20/24");
    let eth0 = ctr.netlink().unwrap().require_link("eth0").unwrap();
    assert_eq!(eth0.alias.as_deref(), Some("nic0"));
    assert!(host.netlink().unwrap().link_by_name("nic0").unwrap().is_none());
    lan_echo(&ctr, &lan);
    host.run(|| cni.check_network_list(&list, &rt)).unwrap().unwrap();
    host.run(|| cni.del_network_list(&list, &rt)).unwrap().unwrap();
    assert!(host.netlink().unwrap().link_by_name("nic0").unwrap().is_some());
    assert!(ctr.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
}
