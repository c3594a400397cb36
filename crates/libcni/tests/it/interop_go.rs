//! Interop (needs root): libcni drives the Go reference plugins (Debian's
//! containernetworking-plugins in /usr/lib/cni) through podman's default chain —
//! bridge(host-local, isGateway, ipMasq) → portmap → firewall → tuning — in a throwaway
//! host namespace, attaching a throwaway container namespace, with real TCP traffic.

use cni_testkit::ns::TestNetns;
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use libcni::{CniConfig, Error, NetworkConfigList, RuntimeConf};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

const GO_PLUGINS: &str = "/usr/lib/cni";

fn require_go_plugins() {
    for plugin in ["bridge", "host-local", "portmap", "firewall", "tuning"] {
        assert!(
            Path::new(GO_PLUGINS).join(plugin).exists(),
            "{GO_PLUGINS}/{plugin} is missing: apt-get install -y containernetworking-plugins iptables"
        );
    }
}

/// podman's default chain, optionally without firewall (0.3.1) or portmap (see CHECK below).
fn podman_chain(
    version: &str,
    index: u8,
    data_dir: &Path,
    with_firewall: bool,
    with_portmap: bool,
) -> NetworkConfigList {
    let mut plugins = vec![
        json!({"type": "bridge", "bridge": format!("cnlbr{index}"), "isGateway": true, "ipMasq": true,
         "hairpinMode": true,
         "ipam": {"type": "host-local", "dataDir": data_dir, "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": format!("10.231.{index}.0/24"), "gateway": format!("10.231.{index}.1")}]]}}),
        json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        json!({"type": "firewall", "backend": "iptables"}),
        json!({"type": "tuning"}),
    ];
    if !with_firewall {
        plugins.remove(2);
    }
    if !with_portmap {
        plugins.remove(1);
    }
    let list = json!({"cniVersion": version, "name": format!("cnl-podman-{index}"), "plugins": plugins});
    NetworkConfigList::from_bytes(&serde_json::to_vec(&list).unwrap()).unwrap()
}

fn run_chain(version: &str, index: u8) {
    require_go_plugins();
    let host = TestNetns::with_prefix("cnl").unwrap();
    let ctr = TestNetns::with_prefix("cnl").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("ipam");
    let cni = CniConfig::new([GO_PLUGINS]).with_cache_dir(dir.path().join("cache"));
    let mut list = podman_chain(version, index, &data_dir, true, true);
    if version == "0.3.1" {
        // The Go firewall plugin speaks 0.4.0 and later only; validation must say so.
        match cni.validate_network_list(&list).unwrap_err() {
            Error::PluginVersionUnsupported { plugin_type, .. } => assert_eq!(plugin_type, "firewall"),
            other => panic!("expected firewall to be refused at 0.3.1: {other}"),
        }
        list = podman_chain(version, index, &data_dir, false, true);
    }
    let rt = RuntimeConf::new(format!("cnl-ctr-{index}"), ctr.path().display().to_string(), "eth0")
        .with_arg("IgnoreUnknown", "1")
        .with_arg("K8S_POD_NAME", "interop")
        .with_capability(
            "portMappings",
            json!([{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]),
        );

    assert_eq!(cni.validate_network_list(&list).unwrap(), ["portMappings"]);

    // Plugins inherit the calling thread's namespace: run libcni inside the test's host.
    let started = Instant::now();
    let added = host.run(|| cni.add_network_list(&list, &rt)).unwrap().unwrap();
    let add_time = started.elapsed();
    assert_eq!(added.json["cniVersion"], version);
    let result = added.parse().unwrap();
    let ip = result.ips.first().expect("an address").clone();
    assert_eq!(ip.address.to_string(), format!("10.231.{index}.2/24"));
    let gateway = ip.gateway.expect("a gateway");
    assert_eq!(gateway, format!("10.231.{index}.1").parse::<IpAddr>().unwrap());
    let sandbox = result.interfaces.iter().find(|i| i.name == "eth0").expect("container interface");
    assert_eq!(sandbox.sandbox, ctr.path().display().to_string());
    assert!(data_dir.join(format!("cnl-podman-{index}")).join(ip.address.addr().to_string()).exists());

    // Real traffic: from the container to a server on the bridge's gateway address.
    let server = tcp_echo_server(host.netns(), SocketAddr::new(gateway, 0)).unwrap();
    tcp_echo(ctr.netns(), server.local_addr(), b"hello across the bridge", Duration::from_secs(5)).unwrap();
    drop(server);

    let started = Instant::now();
    let check = host.run(|| cni.check_network_list(&list, &rt)).unwrap();
    let check_time = started.elapsed();
    if version == "0.3.1" {
        assert!(matches!(check, Err(Error::VerbNotSupported { .. })), "{check:?}");
    } else {
        // The Go portmap 1.1.1 CHECK is broken: it looks for its IPv4 rules in ip6tables
        // (containernetworking/plugins#819). Its error must reach us intact, naming it...
        match check {
            Err(Error::Plugin { plugin_type, command, error }) => {
                assert_eq!((plugin_type.as_str(), command.as_str()), ("portmap", "CHECK"));
                assert!(error.msg.contains("could not check ipv6 dnat"), "{error:?}");
            }
            other => panic!("expected the known Go portmap CHECK failure, got {other:?}"),
        }
        // ...and the rest of the chain checks out against the cached ADD result.
        let without_portmap = podman_chain(version, index, &data_dir, true, false);
        host.run(|| cni.check_network_list(&without_portmap, &rt)).unwrap().unwrap();
    }

    let started = Instant::now();
    host.run(|| cni.del_network_list(&list, &rt)).unwrap().unwrap();
    let del_time = started.elapsed();
    assert!(cni.cached_attachments(None).unwrap().is_empty(), "DEL removed the cache entry");
    assert!(!data_dir.join(format!("cnl-podman-{index}")).join(ip.address.addr().to_string()).exists());
    let links = ctr.ip_json(&["link", "show"]);
    assert!(links.as_array().unwrap().iter().all(|l| l["ifname"] != "eth0"), "eth0 is gone: {links}");
    // A second DEL is fine (idempotent), as runtimes retry.
    host.run(|| cni.del_network_list(&list, &rt)).unwrap().unwrap();
    eprintln!("Go chain {version}: ADD {add_time:?}, CHECK {check_time:?}, DEL {del_time:?}");
}

#[test]
fn go_plugins_podman_chain_0_3_1() {
    run_chain("0.3.1", 31);
}

#[test]
fn go_plugins_podman_chain_0_4_0() {
    run_chain("0.4.0", 40);
}

#[test]
fn go_plugins_podman_chain_1_0_0() {
    run_chain("1.0.0", 100);
}
