//! A test binary of its own: its one host test runs this binary's ignored tests in a VM.
//!
//! Plugins that need kernel features this machine's kernel lacks (dummy, 802.1q vlan,
//! ipvlan, vrf), tested under Debian's kernel in QEMU (`tools/kernel-rig`), and the Go
//! reference plugins for those features driven by our libcni next to ours.
//!
//! Every test below except `kernel_rig_runs_the_kernel_feature_tests` is ignored on the
//! host: that one boots a single VM and runs this binary inside it with `--ignored`, so
//! the whole group costs one VM, and a rig that cannot start fails it loudly. One test by
//! hand (the binary is printed by `cargo test --no-run`):
//!
//!     tools/kernel-rig -- target/debug/deps/kernel_features-<hash> --ignored --exact dummy::add_check_del

// Shared with the `it` binary, of which this one uses a part.
#[path = "it/common/mod.rs"]
#[allow(dead_code)]
mod common;

#[path = "kernel_features/dummy.rs"]
mod dummy;
#[path = "kernel_features/go_interop.rs"]
mod go_interop;
#[path = "kernel_features/ipvlan.rs"]
mod ipvlan;
#[path = "kernel_features/vlan.rs"]
mod vlan;
#[path = "kernel_features/vrf.rs"]
mod vrf;

#[test]
fn kernel_rig_runs_the_kernel_feature_tests() {
    // The guest sees the host's file system read-only: install the plugin links now.
    common::plugin_dir();
    cni_testkit::kernel_rig::run_ignored_tests_in_rig();
}

/// Runs `ip args` in `ns` (test set-up; plugins themselves never spawn `ip`).
fn ip(ns: &cni_testkit::ns::TestNetns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// One layer-2 segment in `host`: a plain bridge (it forwards tagged frames as they are)
/// with a veth pair per name, the named end left outside, up, as a `master` for plugins.
fn segment(host: &cni_testkit::ns::TestNetns, masters: &[&str]) {
    ip(host, &["link", "add", "seg0", "type", "bridge"]);
    ip(host, &["link", "set", "seg0", "up"]);
    for master in masters {
        let port = format!("p{master}");
        ip(host, &["link", "add", master, "type", "veth", "peer", "name", &port]);
        ip(host, &["link", "set", &port, "master", "seg0", "up"]);
        ip(host, &["link", "set", master, "up"]);
    }
}

/// ADD of `base` with each case's keys added is refused with code 7 naming the case's
/// field, and leaves nothing: only `lo` in `container`, no allocation of the network in
/// host-local's `data_dir`.
fn assert_refused_leaving_nothing(
    env: &cni_testkit::ns::HostAndContainers,
    container: &cni_testkit::ns::TestNetns,
    base: &serde_json::Value,
    cases: &[(serde_json::Value, &str)],
    data_dir: &std::path::Path,
) {
    let plugin = base["type"].as_str().expect("the plugin's type");
    for (keys, field) in cases {
        let mut c = base.clone();
        c.as_object_mut().unwrap().extend(keys.as_object().unwrap().clone());
        let err = common::call(plugin, "ADD", &env.host, Some(container), &c).run().error();
        assert_eq!(err.code, 7, "{keys}: {}", err.msg);
        assert!(err.msg.contains(field), "{keys}: {}", err.msg);
    }
    let links = container.netlink().unwrap().links().unwrap();
    assert_eq!(links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["lo"]);
    let network = base["name"].as_str().expect("the network's name");
    let leftovers = std::fs::read_dir(data_dir.join(network)).map(|d| d.count()).unwrap_or(0);
    assert_eq!(leftovers, 0, "an allocation was kept");
}

/// CHECK of the attachment `conf` (with its prevResult) made in `container` passes; DEL
/// takes its `eth0` away; DEL again, and DEL of an attachment that never was, succeed.
fn check_and_delete_idempotently(
    env: &cni_testkit::ns::HostAndContainers,
    container: &cni_testkit::ns::TestNetns,
    conf: &serde_json::Value,
) {
    use common::{call, ok};
    let plugin = conf["type"].as_str().expect("the plugin's type");
    ok(call(plugin, "CHECK", &env.host, Some(container), conf).run());
    ok(call(plugin, "DEL", &env.host, Some(container), conf).run());
    assert!(container.netlink().unwrap().link_by_name("eth0").unwrap().is_none());
    ok(call(plugin, "DEL", &env.host, Some(container), conf).run());
    ok(call(plugin, "DEL", &env.host, None, conf).container_id("gone").ifname("eth0").run());
}
