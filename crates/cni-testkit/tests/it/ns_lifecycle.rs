//! TestNetns / HostAndContainers / echo helpers on the real kernel. Needs root.

use std::path::PathBuf;
use std::time::Duration;

use cni_testkit::ns::{HostAndContainers, TestNetns};
use cni_testkit::traffic::{tcp_echo, tcp_echo_server, udp_echo, udp_echo_server, TrafficError};

#[test]
fn namespace_has_lo_up_and_is_removed_on_drop() {
    let ns = TestNetns::new().unwrap();
    assert!(ns.name().starts_with("cnt-"), "{}", ns.name());
    assert_eq!(ns.path(), PathBuf::from("/run/netns").join(ns.name()));
    let lo = ns.netlink().unwrap().require_link("lo").unwrap();
    assert!(lo.up);
    // `ip netns exec` works on it: it is a real named namespace.
    let status =
        std::process::Command::new("ip").args(["netns", "exec", ns.name(), "true"]).status().unwrap();
    assert!(status.success());
    let path = ns.path().to_path_buf();
    drop(ns);
    assert!(!path.exists(), "namespace file must be gone after drop");
}

#[test]
fn namespace_is_removed_when_the_test_panics() {
    let mut seen = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = TestNetns::with_prefix("cntpanic").unwrap();
        seen = Some(ns.path().to_path_buf());
        panic!("test body failed");
    }));
    assert!(outcome.is_err());
    let path = seen.unwrap();
    assert!(path.file_name().unwrap().to_str().unwrap().starts_with("cntpanic-"));
    assert!(!path.exists(), "unwinding must remove {}", path.display());
}

#[test]
fn command_runs_inside_the_namespace() {
    let ns = TestNetns::new().unwrap();
    let links = ns.ip_json(&["link", "show"]);
    let names: Vec<&str> =
        links.as_array().unwrap().iter().map(|link| link["ifname"].as_str().unwrap()).collect();
    assert_eq!(names, ["lo"], "only the namespace's own loopback is visible");
    let output = ns.command("cat").arg("/proc/self/net/dev").output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.lines().count(), 3, "header lines + lo only:\n{text}");
}

#[test]
fn host_and_containers_are_distinct_namespaces() {
    let net = HostAndContainers::with_prefix("cnt", 3).unwrap();
    assert_eq!(net.containers.len(), 3);
    let mut ids = vec![net.host.netns().id().unwrap()];
    ids.extend(net.containers.iter().map(|c| c.netns().id().unwrap()));
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
}

#[test]
fn echo_over_loopback_inside_a_namespace() {
    let ns = TestNetns::new().unwrap();
    let tcp = tcp_echo_server(ns.netns(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let udp = udp_echo_server(ns.netns(), "127.0.0.1:0".parse().unwrap()).unwrap();
    tcp_echo(ns.netns(), tcp.local_addr(), b"hello tcp", Duration::from_secs(2)).unwrap();
    tcp_echo(ns.netns(), tcp.local_addr(), b"", Duration::from_secs(2)).unwrap();
    udp_echo(ns.netns(), udp.local_addr(), b"hello udp", Duration::from_secs(2)).unwrap();

    // The server lives in the namespace: the same address from another namespace is not it.
    let other = TestNetns::new().unwrap();
    let err = tcp_echo(other.netns(), tcp.local_addr(), b"x", Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, TrafficError::Io { .. }), "{err}");
    let err = udp_echo(other.netns(), udp.local_addr(), b"x", Duration::from_millis(300)).unwrap_err();
    assert!(matches!(err, TrafficError::Io { .. }), "{err}");

    // Dropping the server stops it.
    let addr = tcp.local_addr();
    drop(tcp);
    assert!(tcp_echo(ns.netns(), addr, b"x", Duration::from_secs(1)).is_err());
}
