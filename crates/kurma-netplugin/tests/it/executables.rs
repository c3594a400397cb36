//! The netplugin executables of the images, run as the Kurma host runs them (outside any
//! container, as root, in a throwaway "host" namespace): the seed's `lo` and `mynet`
//! networks on a real namespace, real traffic, nothing left after `del`; the error
//! behaviour; concurrent containers.

use crate::common::{self, Images, PREFIX};
use cni_net::netlink::LinkKind;
use cni_testkit::host_local::reservations;
use cni_testkit::ns::{require_root, HostAndContainers, TestNetns};
use cni_testkit::poll::{until, EVENTUALLY};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const UUID: &str = "146d7cef-fbf6-41da-a2f8-eba218597f9c";

fn lo_entry() -> Value {
    json!({"name": "lo", "aci": "file:///images/lo-netplugin.aci"})
}

/// The seed's `mynet`, with the bridge named for these tests and host-local's state in
/// the test's temp dir.
fn mynet_entry(data_dir: &Path) -> Value {
    json!({"name": "mynet", "aci": "file:///images/cni-netplugin.aci", "containerInterface": "eth0",
        "type": "bridge", "bridge": "knbr0", "isGateway": true, "ipMasq": true,
        "ipam": {"type": "host-local", "subnet": "10.10.0.0/16", "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": data_dir}})
}

fn links(ns: &TestNetns) -> Vec<(String, LinkKind)> {
    ns.netlink().unwrap().links().unwrap().into_iter().map(|l| (l.name, l.kind)).collect()
}

/// The interface's addresses but IPv6 link-local ones (which the kernel adds itself).
fn addresses_of(ns: &TestNetns, ifname: &str) -> Vec<String> {
    let shown = ns.ip_json(&["addr", "show", "dev", ifname]);
    shown[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .filter(|a| !a.starts_with("fe80:"))
        .collect()
}

#[test]
fn lo_and_mynet_attach_a_namespace_that_reaches_the_gateway_and_del_leaves_nothing() {
    require_root();
    let images = Images::new();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let (host, container) = (&env.host, &env.containers[0]);
    let data = images.dir.path().join("host-local");
    let (lo, mynet) = (lo_entry(), mynet_entry(&data));

    // setup: nothing printed, exit 0; a second run (a restarted daemon) too.
    for _ in 0..2 {
        assert_eq!(images.lo.run(host, "setup", &[], &lo).ok(), "");
        assert_eq!(images.cni.run(host, "setup", &[], &mynet).ok(), "");
    }

    // lo: the loopback plugin brings the container's lo up (the testkit made it up: down
    // first) and reports its addresses.
    let mut netlink = container.netlink().unwrap();
    let lo_link = netlink.require_link("lo").unwrap();
    netlink.set_link_down(lo_link.index).unwrap();
    let netns = container.path().to_str().unwrap();
    let lo_result = images.lo.run(host, "add", &[netns, UUID], &lo);
    assert_eq!(
        lo_result.json(),
        json!({"ip4": {"ip": "127.0.0.1/8"}, "ip6": {"ip": "::1/128"}}),
        "{lo_result:?}"
    );
    let shown = container.ip_json(&["link", "show", "dev", "lo"]);
    assert!(shown[0]["flags"].as_array().unwrap().contains(&json!("UP")), "lo is not up: {shown}");
    assert!(addresses_of(container, "lo").contains(&"127.0.0.1/8".to_string()));

    // mynet: bridge + host-local, the Kurma result in the seed's ip4 form.
    let added = images.cni.run(host, "add", &[netns, UUID, "eth0"], &mynet);
    let result = added.json();
    let ip = result["ip4"]["ip"].as_str().unwrap_or_else(|| panic!("no ip4: {added:?}")).to_string();
    assert!(ip.starts_with("10.10.") && ip.ends_with("/16"), "{result}");
    assert_eq!(result["ip4"]["gateway"], "10.10.0.1");
    assert_eq!(result["ip4"]["routes"], json!([{"dst": "0.0.0.0/0"}]));
    assert!(result.get("ip6").is_none(), "{result}");
    assert_eq!(addresses_of(container, "eth0"), std::slice::from_ref(&ip));
    assert_eq!(reservations(&data, "mynet"), [ip.split('/').next().unwrap().to_string()]);
    assert!(host.nft_text().contains(ip.split('/').next().unwrap()), "no masquerade rule for the container");

    // Real traffic: a TCP echo from the container to a server on the bridge's gateway.
    let server = tcp_echo_server(host.netns(), "10.10.0.1:0".parse().unwrap()).unwrap();
    let gateway = SocketAddr::new("10.10.0.1".parse().unwrap(), server.local_addr().port());
    tcp_echo(container.netns(), gateway, b"kurma mynet", Duration::from_secs(5)).unwrap();
    assert_eq!(images.cni.cached_results(), [format!("mynet-{UUID}-eth0")]);

    // del: nothing printed, exit 0; twice (idempotent).
    for round in 0..2 {
        assert_eq!(images.cni.run(host, "del", &[netns, UUID, "eth0"], &mynet).ok(), "", "round {round}");
        assert_eq!(images.lo.run(host, "del", &[netns, UUID], &lo).ok(), "", "round {round}");
    }
    until("the container has only lo", EVENTUALLY, || links(container).iter().all(|(name, _)| name == "lo"));
    until("the host has no veth", EVENTUALLY, || links(host).iter().all(|(_, kind)| *kind != LinkKind::Veth));
    assert!(reservations(&data, "mynet").is_empty());
    assert!(!host.nft_text().contains(ip.split('/').next().unwrap()), "a rule for the container is left");
    assert!(images.cni.cached_results().is_empty() && images.lo.cached_results().is_empty());
}

#[test]
fn del_after_the_container_is_gone_still_releases_its_address() {
    require_root();
    let images = Images::new();
    let mut env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let data = images.dir.path().join("host-local");
    let mynet = mynet_entry(&data);
    let container = env.containers.pop().unwrap();
    let netns = container.path().to_str().unwrap().to_string();
    images.cni.run(&env.host, "add", &[&netns, UUID, "eth0"], &mynet).ok();
    assert_eq!(reservations(&data, "mynet").len(), 1);
    drop(container);
    assert_eq!(images.cni.run(&env.host, "del", &[&netns, UUID, "eth0"], &mynet).ok(), "");
    assert!(reservations(&data, "mynet").is_empty());
    until("the host has no veth", EVENTUALLY, || {
        links(&env.host).iter().all(|(_, kind)| *kind != LinkKind::Veth)
    });
}

#[test]
fn concurrent_adds_for_different_containers_get_distinct_addresses_and_dels_release_all() {
    require_root();
    let images = Images::new();
    let env = HostAndContainers::with_prefix(PREFIX, 8).unwrap();
    let data = images.dir.path().join("host-local");
    let mynet = mynet_entry(&data);
    let uuid = |i: usize| format!("146d7cef-fbf6-41da-a2f8-eba2185970{i:02}");
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = env
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (images, host, mynet) = (&images, &env.host, &mynet);
                s.spawn(move || {
                    images.cni.run(host, "add", &[c.path().to_str().unwrap(), &uuid(i), "eth0"], mynet).json()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ips: HashSet<String> = results.iter().map(|r| r["ip4"]["ip"].as_str().unwrap().to_string()).collect();
    assert_eq!(ips.len(), 8, "duplicate addresses: {results:?}");
    assert_eq!(reservations(&data, "mynet").len(), 8);
    std::thread::scope(|s| {
        for (i, c) in env.containers.iter().enumerate() {
            let (images, host, mynet) = (&images, &env.host, &mynet);
            s.spawn(move || {
                images
                    .cni
                    .run(host, "del", &[c.path().to_str().unwrap(), &uuid(i), "eth0"], mynet)
                    .ok()
                    .to_string()
            });
        }
    });
    assert!(reservations(&data, "mynet").is_empty());
    assert!(images.cni.cached_results().is_empty());
    until("the host has no veth", EVENTUALLY, || {
        links(&env.host).iter().all(|(_, kind)| *kind != LinkKind::Veth)
    });
}

/// A failure: exit status 1, the CNI error object on stdout, the same words on stderr.
fn assert_fails(run: &common::Run, code: u64, words: &str) {
    assert_eq!(run.status, 1, "{run:?}");
    let error = run.json();
    assert_eq!(error["code"], code, "{run:?}");
    let msg = error["msg"].as_str().unwrap();
    assert!(msg.contains(words), "{msg:?} does not contain {words:?}");
    assert!(run.stderr.contains(words), "stderr {:?} does not contain {words:?}", run.stderr);
}

#[test]
fn bad_configurations_and_arguments_fail_with_the_error_on_stdout_and_stderr() {
    require_root();
    let images = Images::new();
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let (host, container) = (&env.host, &env.containers[0]);
    let data = images.dir.path().join("host-local");
    let netns = container.path().to_str().unwrap();
    let mynet = mynet_entry(&data);
    let with = |key: &str, value: Value| {
        let mut entry = mynet.clone();
        entry[key] = value;
        entry
    };
    let mut no_type = mynet.clone();
    no_type.as_object_mut().unwrap().remove("type");
    let mut no_aci = mynet.clone();
    no_aci.as_object_mut().unwrap().remove("aci");

    // setup validates: the plugin must be in the image and speak the version.
    assert_fails(&images.cni.run(host, "setup", &[], &no_type), 7, "network \"mynet\": \"type\" is missing");
    assert_fails(
        &images.cni.run(host, "setup", &[], &with("type", json!("vlan0"))),
        7,
        "plugin \"vlan0\" not found",
    );
    assert_fails(
        &images.lo.run(host, "setup", &[], &with("type", json!("bridge"))),
        7,
        "plugin \"bridge\" not found",
    );
    let ipam = json!({"type": "nosuch-ipam"});
    assert_fails(
        &images.cni.run(host, "setup", &[], &with("ipam", ipam)),
        7,
        "plugin \"nosuch-ipam\" not found",
    );
    assert_fails(&images.cni.run(host, "setup", &[], &with("cniVersion", json!("9.9.9"))), 7, "9.9.9");
    assert_fails(&images.cni.run(host, "setup", &["extra"], &mynet), 4, "setup takes no arguments");
    assert_fails(&images.cni.run(host, "setup", &[], &no_aci), 7, "\"aci\" is missing");
    let garbage = images.cni.run(host, "setup", &[], &json!("not an object"));
    assert_fails(&garbage, 7, "must be a JSON object");

    // add: wrong arguments, a plugin that needs an interface, a missing namespace.
    assert_fails(&images.cni.run(host, "add", &[netns], &mynet), 4, "expected 2 or 3 arguments, got 1");
    assert_fails(&images.cni.run(host, "add", &[netns, UUID], &mynet), 4, "needs an interface name");
    assert_fails(&images.cni.run(host, "add", &[netns, "bad/uuid", "eth0"], &mynet), 4, "bad/uuid");
    let missing = images.cni.run(host, "add", &["/proc/0/ns/net", UUID, "eth0"], &mynet);
    // The plugin's own error (code 3, unknown container) comes through, network named.
    assert_fails(&missing, 3, "network \"mynet\": failed to open netns \"/proc/0/ns/net\"");
    // ... and the failed add left nothing.
    assert!(reservations(&data, "mynet").is_empty());
    assert!(links(host).iter().all(|(_, kind)| *kind != LinkKind::Veth), "{:?}", links(host));
    assert!(images.cni.cached_results().is_empty());
}

#[test]
fn setup_starts_the_dhcp_daemon_detached_and_a_second_setup_checks_or_restarts_it() {
    require_root();
    let images = Images::new();
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    let socket = images.dir.path().join("dhcp.sock");
    let entry = json!({"name": "dhcpnet", "aci": "file:///cni-netplugin.aci", "containerInterface": "eth0",
        "type": "bridge", "bridge": "knbr1", "ipam": {"type": "dhcp", "daemonSocketPath": socket}});
    let pid_file = images.cni.state.join("dhcp/daemon.pid");
    let daemon_pid = || std::fs::read_to_string(&pid_file).unwrap().trim().parse::<u32>().unwrap();
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let parent_of = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit(')').next().unwrap().split_whitespace().nth(1).unwrap().parse::<u32>().unwrap()
    };

    // setup returns (its output pipes are not held by the daemon) with the daemon answering.
    assert_eq!(images.cni.run(&host, "setup", &[], &entry).ok(), "");
    std::os::unix::net::UnixStream::connect(&socket).expect("the daemon answers on its socket");
    let first = daemon_pid();
    assert!(alive(first));
    assert_ne!(parent_of(first), std::process::id(), "the daemon was double-forked away");

    // A second setup (the host restarted) finds it healthy and starts no other.
    assert_eq!(images.cni.run(&host, "setup", &[], &entry).ok(), "");
    assert_eq!(daemon_pid(), first);

    // A dead daemon is started again by the next setup.
    cni_os::process::kill(first, cni_os::process::Signal::KILL).expect("kill the daemon this test started");
    until("the daemon is gone", EVENTUALLY, || {
        !alive(first)
            || std::fs::read_to_string(format!("/proc/{first}/stat"))
                .map(|s| s.contains(") Z"))
                .unwrap_or(true)
    });
    assert_eq!(images.cni.run(&host, "setup", &[], &entry).ok(), "");
    let second = daemon_pid();
    assert_ne!(second, first);
    std::os::unix::net::UnixStream::connect(&socket).expect("the new daemon answers");
    cni_os::process::kill(second, cni_os::process::Signal::TERM).expect("stop the daemon this test started");
    until("the second daemon is gone", EVENTUALLY, || {
        !alive(second)
            || std::fs::read_to_string(format!("/proc/{second}/stat"))
                .map(|s| s.contains(") Z"))
                .unwrap_or(true)
    });
}

/// The cni-netplugin image with the workspace's scriptable test plugin as `kntest` on a
/// second CNI_PATH directory, and plugins given `time_limit` seconds.
fn images_with_test_plugin(time_limit: &str) -> (Images, std::path::PathBuf) {
    let mut images = Images::new();
    let extra = images.dir.path().join("extra-plugins");
    std::fs::create_dir(&extra).unwrap();
    std::os::unix::fs::symlink(cni_testkit::binaries::test_plugin(), extra.join("kntest")).unwrap();
    images.cni.cni_path = format!("{}:{}", images.cni.cni_path, extra.display());
    images.cni.env.push(("KURMA_NETPLUGIN_PLUGIN_TIMEOUT".into(), time_limit.into()));
    let log = images.dir.path().join("kntest.log");
    (images, log)
}

fn test_entry(log: &Path, behaviour: Value) -> Value {
    json!({"name": "kntestnet", "aci": "file:///cni-netplugin.aci", "containerInterface": "eth0",
        "type": "kntest", "logFile": log, "testBehaviour": behaviour})
}

fn verbs(log: &Path) -> Vec<String> {
    cni_testkit::test_plugin::read_log(log).iter().map(|i| i.var("CNI_COMMAND").to_string()).collect()
}

#[test]
fn a_failed_or_stuck_plugin_add_is_rolled_back_and_reported_within_the_limit() {
    require_root();
    let (images, log) = images_with_test_plugin("1");
    let env = HostAndContainers::with_prefix(PREFIX, 1).unwrap();
    let netns = env.containers[0].path().to_str().unwrap();

    // The plugin's own error object comes through with its code; a DEL followed the ADD.
    let failing = json!({"perCommand": {"ADD": {"error": {"code": 11, "msg": "kn: no room"}}}});
    let run = images.cni.run(&env.host, "add", &[netns, UUID, "eth0"], &test_entry(&log, failing));
    assert_fails(&run, 11, "network \"kntestnet\": kn: no room");
    let calls = cni_testkit::test_plugin::read_log(&log);
    assert_eq!(verbs(&log), ["ADD", "DEL"]);
    assert!(calls.iter().all(|c| c.var("CNI_CONTAINERID") == UUID && c.var("CNI_IFNAME") == "eth0"));
    assert_eq!(calls[0].var("CNI_NETNS"), netns);

    // A plugin that hangs is killed at the limit (1 s here), reported, and rolled back.
    std::fs::remove_file(&log).unwrap();
    let stuck = json!({"perCommand": {"ADD": {"sleepMs": 600_000}}});
    let run = images.cni.run(&env.host, "add", &[netns, UUID, "eth0"], &test_entry(&log, stuck));
    assert_fails(&run, 11, "did not finish ADD within 1s");
    assert_eq!(verbs(&log), ["ADD", "DEL"]);
    assert!(images.cni.cached_results().is_empty());
}

#[test]
fn setup_refuses_a_plugin_that_does_not_speak_the_version() {
    require_root();
    let (mut images, log) = images_with_test_plugin("5");
    let host = TestNetns::with_prefix(PREFIX).unwrap();
    // VERSION has no configuration: the test plugin reads its answer from a file.
    let behaviour = images.dir.path().join("version-behaviour.json");
    std::fs::write(&behaviour, r#"{"supportedVersions": ["0.3.1", "0.4.0"]}"#).unwrap();
    images.cni.env.push(("CNI_TEST_BEHAVIOUR".into(), behaviour.display().to_string()));
    let run = images.cni.run(&host, "setup", &[], &test_entry(&log, json!({})));
    assert_fails(&run, 1, "plugin \"kntest\" does not support configuration version 1.1.0");
    // Named in the entry, a version it speaks passes (and STATUS, which needs 1.1.0, is
    // not asked of it).
    let mut entry = test_entry(&log, json!({}));
    entry["cniVersion"] = json!("0.4.0");
    assert_eq!(images.cni.run(&host, "setup", &[], &entry).ok(), "");
    assert!(!verbs(&log).contains(&"STATUS".to_string()), "{:?}", verbs(&log));
}
