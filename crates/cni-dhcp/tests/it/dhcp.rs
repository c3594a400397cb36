//! The dhcp plugin and its daemon against real DHCP servers (dnsmasq, kea), each test in
//! its own namespaces: a server namespace on a bridge in the test's host namespace, the
//! containers attached by the bridge plugin with dhcp IPAM.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{self, call};
use crate::support::{self, wait_for, Network};
use cni_testkit::ns::TestNetns;
use serde_json::{json, Value};

const PREFIX: &str = "cdh";

fn add(net: &Network, container: &TestNetns) -> Value {
    let out = call("bridge", "ADD", &net.host, Some(container), &net.conf()).args("K8S_POD_NAME=web-1").run();
    assert!(
        out.success(),
        "ADD failed: {}\n{}\ndaemon log:\n{}\nserver log:\n{}{}",
        out.stdout,
        out.stderr,
        net.log("daemon.log"),
        net.log("dnsmasq.log"),
        net.log("kea.log")
    );
    out.json()
}

fn verb(net: &Network, verb: &str, container: &TestNetns) -> cni_testkit::runner::PluginOutput {
    call("bridge", verb, &net.host, Some(container), &net.conf()).run()
}

fn address(result: &Value) -> String {
    result["ips"][0]["address"].as_str().unwrap().to_string()
}

/// The address without its prefix length.
fn ip(result: &Value) -> String {
    address(result).split('/').next().unwrap().to_string()
}

/// How many times kea granted or extended `ip` (one line per ACK in its log).
fn kea_grants(net: &Network, ip: &str) -> usize {
    net.log("kea.log")
        .lines()
        .filter(|l| l.contains("DHCP4_LEASE_ALLOC") && l.contains(&format!("{ip} ")))
        .count()
}

#[test]
fn lease_with_routes_and_dns_then_release_and_same_address_again() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();

    let result = add(&net, &container);
    assert!(address(&result).starts_with("10.77.0.") && address(&result).ends_with("/24"), "{result}");
    assert_eq!(result["ips"][0]["gateway"], "10.77.0.1");
    // Option 121 wins over option 3 (RFC 3442).
    assert_eq!(
        result["routes"],
        json!([{"dst": "10.9.0.0/16", "gw": "10.77.0.254"}, {"dst": "0.0.0.0/0", "gw": "10.77.0.1"}])
    );
    assert_eq!(
        result["dns"],
        json!({"nameservers": ["10.77.0.53"], "domain": "example.test", "search": ["a.example", "b.example"]})
    );
    // The bridge put the address on the container's interface; the hostname went out.
    let addrs = container.ip_json(&["addr", "show", "eth0"]);
    assert!(addrs.to_string().contains(&ip(&result)), "{addrs}");
    assert!(net.log("dnsmasq.log").contains("web-1"), "hostname not sent:\n{}", net.log("dnsmasq.log"));
    assert!(net.log("dnsmasq.leases").contains(&ip(&result)));

    let check = call("bridge", "CHECK", &net.host, Some(&container), &net.conf())
        .config(&{
            let mut c = net.conf();
            c["prevResult"] = result.clone();
            c
        })
        .run();
    assert!(check.success(), "CHECK: {} {}", check.stdout, check.stderr);
    assert!(verb(&net, "STATUS", &container).success());

    let del = verb(&net, "DEL", &container);
    assert!(del.success(), "DEL: {}", del.stdout);
    wait_for("dnsmasq to see the DHCPRELEASE", Duration::from_secs(10), || {
        net.log("dnsmasq.log").contains(&format!("DHCPRELEASE(srv0) {}", ip(&result)))
    });
    assert!(!net.log("dnsmasq.leases").contains(&ip(&result)), "lease still in the server's file");
    assert!(net.records().is_empty(), "{:?}", net.records());
    // DEL is idempotent, also without a namespace.
    let again = call("bridge", "DEL", &net.host, None, &net.conf()).container_id(container.name()).run();
    assert!(again.success(), "second DEL: {}", again.stdout);

    let second = add(&net, &container);
    assert_eq!(ip(&second), ip(&result), "the same client id gets its address back");
}

/// Kea granting 8 s leases renewed after 2 s, the daemon, and a container holding a lease
/// through it: where the tests that restart the daemon under a live lease start. (Bound in
/// this order, the fields drop as the test's own locals did: container first, network last.)
struct LeaseHeld {
    net: Network,
    _server: support::ChildGuard,
    daemon: support::ChildGuard,
    container: TestNetns,
    result: Value,
}

fn lease_held() -> LeaseHeld {
    let net = Network::new(PREFIX);
    let _server = net.kea(8, 2, 5);
    let daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let result = add(&net, &container);
    LeaseHeld { net, _server, daemon, container, result }
}

#[test]
fn renewal_survives_kill_9_and_restart() {
    let LeaseHeld { net, _server, mut daemon, container, result } = lease_held();
    let ip = ip(&result);
    assert_eq!(kea_grants(&net, &ip), 1, "{}", net.log("kea.log"));
    wait_for("a renewal at the server", Duration::from_secs(20), || kea_grants(&net, &ip) >= 2);

    // No graceful shutdown: the lease must come back from the state directory.
    daemon.kill();
    let seen = kea_grants(&net, &ip);
    let _daemon = net.daemon();
    wait_for("a renewal by the restarted daemon", Duration::from_secs(20), || kea_grants(&net, &ip) > seen);
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(status.leases[0].address, address(&result));
    let mut conf = net.conf();
    conf["prevResult"] = result.clone();
    let check = call("bridge", "CHECK", &net.host, Some(&container), &conf).run();
    assert!(check.success(), "CHECK: {} {}", check.stdout, check.stderr);
}

/// An upgrade from a version that named records `<net>-<containerID>-<ifname>.json`
/// (names two attachments could share) and wrote them 0644: the new daemon renames the
/// record, makes it 0600, resumes the lease and renews it at the server.
#[test]
fn a_record_under_its_old_name_is_renamed_and_its_lease_resumed() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let LeaseHeld { net, _server, mut daemon, container, result } = lease_held();
    let ip = ip(&result);
    daemon.kill();
    let current = net.state_dir().join(format!("dhnet+{}+eth0.json", container.name()));
    let old = net.state_dir().join(format!("dhnet-{}-eth0.json", container.name()));
    assert_eq!(std::fs::metadata(&current).unwrap().mode() & 0o7777, 0o600, "records are 0600");
    std::fs::rename(&current, &old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();

    let seen = kea_grants(&net, &ip);
    let _daemon = net.daemon();
    assert!(!old.exists(), "the old name stayed: {:?}", net.records());
    assert_eq!(std::fs::metadata(&current).unwrap().mode() & 0o7777, 0o600);
    assert!(
        net.log("daemon.log").contains("renamed a record named as earlier versions did"),
        "{}",
        net.log("daemon.log")
    );
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(status.leases[0].address, address(&result));
    wait_for("a renewal of the resumed lease", Duration::from_secs(20), || kea_grants(&net, &ip) > seen);
    assert!(verb(&net, "DEL", &container).success());
    assert!(net.records().is_empty(), "{:?}", net.records());
}

/// Network `dsa-b` with container `c` and network `dsa` with container `b-c`: under the
/// old record names (`<net>-<cid>-<ifname>.json`) both leases went to one file, so one
/// attachment's DEL took the other's record and a restart lost its lease. Each keeps its
/// own record now: the DEL of one leaves the other, which a restarted daemon resumes.
#[test]
fn attachments_whose_old_record_names_collide_keep_their_leases_apart() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let mut daemon = net.daemon();
    let attachment = |network: &str, id: &str| {
        let mut conf = net.conf();
        conf["name"] = network.into();
        (conf, id.to_string(), TestNetns::with_prefix(PREFIX).unwrap())
    };
    let first = attachment("dsa-b", "c");
    let second = attachment("dsa", "b-c");
    let run = |verb: &str, (conf, id, container): &(Value, String, TestNetns)| {
        call("bridge", verb, &net.host, Some(container), conf).container_id(id).run()
    };
    let (one, two) = (run("ADD", &first), run("ADD", &second));
    assert!(
        one.success() && two.success(),
        "ADD: {} {} / {} {}",
        one.stdout,
        one.stderr,
        two.stdout,
        two.stderr
    );
    let kept = address(&two.json());
    assert_ne!(address(&one.json()), kept);
    let mut records = net.records();
    records.sort();
    assert_eq!(records, ["dsa+b-c+eth0.json", "dsa-b+c+eth0.json"]);

    assert!(run("DEL", &first).success());
    assert_eq!(net.records(), ["dsa+b-c+eth0.json"], "the other attachment's record stays");
    daemon.kill();
    let _daemon = net.daemon();
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(
        (status.leases[0].key.network.as_str(), status.leases[0].address.as_str()),
        ("dsa", kept.as_str())
    );
    assert!(run("DEL", &second).success());
    assert!(net.records().is_empty(), "{:?}", net.records());
}

#[test]
fn server_gone_rebinding_then_expiry_is_reported() {
    let net = Network::new(PREFIX);
    // Rebinding lasts from T2 (4 s) to expiry (8 s): wide enough to be seen at any load.
    let mut server = net.kea(8, 2, 4);
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let result = add(&net, &container);
    server.kill();
    let state = || net.status().leases.first().map(|l| l.state.clone()).unwrap_or_default();
    wait_for("rebinding", Duration::from_secs(15), || state() == "rebinding");
    wait_for("expiry", Duration::from_secs(15), || state() == "expired");
    let mut conf = net.conf();
    conf["prevResult"] = result;
    let check = call("bridge", "CHECK", &net.host, Some(&container), &conf).run();
    assert!(!check.success(), "CHECK passed on an expired lease");
    assert!(check.error().msg.contains("lost"), "{}", check.error().msg);
    assert!(net.log("daemon.log").contains("expired"), "{}", net.log("daemon.log"));
    // DEL of a lost lease still cleans up.
    assert!(verb(&net, "DEL", &container).success());
    assert!(net.records().is_empty());
}

#[test]
fn parallel_containers_get_distinct_leases_and_gc_releases_the_stale_one() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let _daemon = net.daemon();
    let containers: Vec<TestNetns> = (0..2).map(|_| TestNetns::with_prefix(PREFIX).unwrap()).collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = containers.iter().map(|c| s.spawn(|| add(&net, c))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ips: HashSet<String> = results.iter().map(ip).collect();
    assert_eq!(ips.len(), 2, "{results:?}");
    assert_eq!(net.records().len(), 2);

    let mut gc = net.conf();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": containers[0].name(), "ifname": "eth0"}]);
    let out = call("bridge", "GC", &net.host, None, &gc).run();
    assert!(out.success(), "GC: {} {}", out.stdout, out.stderr);
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(status.leases[0].key.container_id, containers[0].name());
    wait_for("dnsmasq to see the release", Duration::from_secs(10), || {
        net.log("dnsmasq.log").contains(&format!("DHCPRELEASE(srv0) {}", ip(&results[1])))
    });
}

#[test]
fn silent_network_times_out_clearly_and_leaves_nothing() {
    let net = Network::new(PREFIX); // no server
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let out = verb(&net, "ADD", &container);
    assert!(!out.success());
    let err = out.error();
    assert_eq!(err.code, 11, "{err:?}");
    assert!(err.msg.contains("no answer from a DHCP server"), "{}", err.msg);
    assert!(net.records().is_empty());
    assert!(net.status().leases.is_empty());
    common::wait_link_gone(&container, "eth0");
}

#[test]
fn daemon_not_running_is_try_again_later_and_status_50() {
    let net = Network::new(PREFIX);
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let conf = json!({"cniVersion": "1.1.0", "name": "dhnet", "type": "dhcp",
                      "ipam": {"type": "dhcp", "daemonSocketPath": net.socket()}});
    let out = call("dhcp", "ADD", &net.host, Some(&container), &conf).run();
    let err = out.error();
    assert_eq!(err.code, 11);
    assert!(err.msg.contains("start it with `dhcp daemon`"), "{}", err.msg);
    let status = call("dhcp", "STATUS", &net.host, None, &conf).run();
    assert_eq!(status.error().code, 50);
    let bad = json!({"cniVersion": "1.1.0", "name": "dhnet", "type": "dhcp",
                     "ipam": {"type": "dhcp", "daemonSocketPath": net.socket(), "request": [{"option": "nope"}]}});
    let err = call("dhcp", "ADD", &net.host, Some(&container), &bad).run().error();
    assert_eq!(err.code, 7);
    assert!(err.msg.contains("ipam.request[0].option"), "{}", err.msg);
}

/// systemd socket activation: the daemon serves the socket passed as fd 3 (LISTEN_FDS,
/// LISTEN_PID) instead of binding its own, and writes its pid file.
#[test]
fn socket_activation_and_pid_file() {
    cni_testkit::ns::require_root();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("activated.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let pid_file = dir.path().join("daemon.pid");
    let mut command = std::process::Command::new("/bin/sh");
    // `exec` keeps the shell's pid, so $$ is the daemon's pid, as systemd would set it.
    command
        .arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" daemon -socketpath /nonexistent/x.sock -pidfile \"$1\" -statedir \"$2\"")
        .arg(common::plugin("dhcp"))
        .arg(&pid_file)
        .arg(dir.path().join("state"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap());
    cni_os::process::pass_as_fd3_on_spawn(&mut command, listener.try_clone().unwrap().into());
    let child = support::ChildGuard(Some(command.spawn().unwrap()));
    let pid = child.0.as_ref().unwrap().id();
    // The daemon owns its copy now; ours (and the one the spawn hook holds) must not keep
    // the socket open.
    drop(command);
    drop(listener);
    wait_for("the activated daemon to answer", Duration::from_secs(10), || {
        cni_dhcp::protocol::call(&socket, cni_dhcp::protocol::Op::Status, None, Duration::from_secs(5))
            .is_ok_and(|r| r.ok)
    });
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap().trim(), pid.to_string());
    assert!(!std::path::Path::new("/nonexistent/x.sock").exists());
}

/// The Go reference bridge delegating to our dhcp plugin and daemon, and our bridge
/// delegating to the Go dhcp plugin and daemon, against one dnsmasq. (The two daemons
/// speak different protocols — Go's is net/rpc, gob over HTTP — so each plugin needs its
/// own daemon.)
#[test]
fn go_reference_interop_both_ways() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let _ours = net.daemon();
    let _go = net.go_daemon();
    let (ours_in_go, go_in_ours) =
        (TestNetns::with_prefix(PREFIX).unwrap(), TestNetns::with_prefix(PREFIX).unwrap());

    let mut conf = net.conf();
    conf["cniVersion"] = json!("1.0.0");
    let out = cni_testkit::runner::PluginCall::new(support::GO_BRIDGE, "ADD")
        .in_namespace(net.host.path())
        .cni_path(&common::plugin_dir().display().to_string())
        .netns(ours_in_go.path())
        .container_id(ours_in_go.name())
        .config(&conf)
        .run();
    assert!(out.success(), "Go bridge + our dhcp: {} {}\n{}", out.stdout, out.stderr, net.log("daemon.log"));
    let first = out.json();
    assert!(address(&first).starts_with("10.77.0."), "{first}");

    let mut conf = net.conf();
    conf["cniVersion"] = json!("1.0.0");
    conf["ipam"] = json!({"type": "dhcp", "daemonSocketPath": net.path("go-dhcp.sock")});
    let out = call("bridge", "ADD", &net.host, Some(&go_in_ours), &conf).cni_path("/usr/lib/cni").run();
    assert!(
        out.success(),
        "our bridge + Go dhcp: {} {}\n{}",
        out.stdout,
        out.stderr,
        net.log("go-daemon.log")
    );
    let second = out.json();
    assert!(address(&second).starts_with("10.77.0."), "{second}");
    assert_ne!(ip(&first), ip(&second));
    let addrs = go_in_ours.ip_json(&["addr", "show", "eth0"]);
    assert!(addrs.to_string().contains(&ip(&second)), "{addrs}");

    let del = call("bridge", "DEL", &net.host, Some(&go_in_ours), &conf).cni_path("/usr/lib/cni").run();
    assert!(del.success(), "DEL via the Go daemon: {}", del.stdout);

    // Our plugin pointed at the Go daemon says what is wrong.
    conf["cniVersion"] = json!("1.1.0");
    let err = call("dhcp", "STATUS", &net.host, None, &conf).run().error();
    assert_eq!(err.code, 50);
    assert!(err.msg.contains("Go reference dhcp daemon"), "{}", err.msg);
}

/// A restart after `kill -9` keeps the lease of a container that still exists and forgets
/// the one whose namespace went away meanwhile; a DEL without a namespace is then fine.
#[test]
fn restart_forgets_leases_of_vanished_containers() {
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let mut daemon = net.daemon();
    let kept = TestNetns::with_prefix(PREFIX).unwrap();
    let gone = TestNetns::with_prefix(PREFIX).unwrap();
    let gone_id = gone.name().to_string();
    add(&net, &kept);
    add(&net, &gone);
    daemon.kill();
    drop(gone);
    let _daemon = net.daemon();
    let status = net.status();
    assert_eq!(status.leases.len(), 1, "{status:?}");
    assert_eq!(status.leases[0].key.container_id, kept.name());
    assert_eq!(net.records().len(), 1, "{:?}", net.records());
    assert!(net.log("daemon.log").lines().any(|l| l.contains("its namespace or interface is gone")
        && l.contains(&format!("attachment=dhnet/{gone_id}/eth0"))));
    let del = call("bridge", "DEL", &net.host, None, &net.conf()).container_id(&gone_id).run();
    assert!(del.success(), "DEL without netns: {}", del.stdout);
}

/// The daemon's lease records damaged while it was down (after `kill -9`), one container
/// per kind (emptied, cut short, garbage, a directory): the restarted daemon starts, logs
/// each as ignored and tracks none of them; each container's DEL succeeds and takes its
/// damaged record away; GC succeeds and leaves an empty state directory. A temporary
/// file of an interrupted save is removed when the daemon starts.
#[test]
fn damaged_lease_records_are_skipped_and_del_and_gc_succeed() {
    use cni_testkit::damage::Damage;
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let mut daemon = net.daemon();
    let containers: Vec<TestNetns> =
        Damage::ALL.iter().map(|_| TestNetns::with_prefix(PREFIX).unwrap()).collect();
    for container in &containers {
        add(&net, container);
    }
    daemon.kill();
    let record = |c: &TestNetns| net.state_dir().join(format!("dhnet+{}+eth0.json", c.name()));
    for (container, kind) in containers.iter().zip(Damage::ALL) {
        kind.apply(&record(container));
    }
    // And a save the kill interrupted before its rename: gone once the daemon is back.
    let interrupted = net.state_dir().join(format!(".dhnet-{}-eth0.json.tmp", containers[0].name()));
    std::fs::write(&interrupted, b"{\"version\":1,\"netw").unwrap();
    let _daemon = net.daemon();
    assert!(!interrupted.exists(), "the interrupted save's temporary file stayed");
    assert!(net.status().leases.is_empty(), "{:?}", net.status());
    let log = net.log("daemon.log");
    for container in &containers {
        let ignored = format!("ignoring an unreadable lease record path={}", record(container).display());
        assert!(log.contains(&ignored), "{log}");
    }
    for (container, kind) in containers.iter().zip(Damage::ALL) {
        let del = verb(&net, "DEL", container);
        assert!(del.success(), "{kind:?}: DEL {} {}", del.stdout, del.stderr);
        assert!(!record(container).exists(), "{kind:?}: the damaged record stayed");
    }
    let mut gc = net.conf();
    gc["cni.dev/valid-attachments"] = json!([]);
    let out = call("bridge", "GC", &net.host, None, &gc).run();
    assert!(out.success(), "GC: {} {}", out.stdout, out.stderr);
    assert!(net.records().is_empty(), "{:?}", net.records());
}

#[test]
fn the_daemon_logs_a_lease_and_its_release_with_the_runtimes_trace_id() {
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let net = Network::new(PREFIX);
    let _server = net.dnsmasq();
    let _daemon = net.daemon();
    let container = TestNetns::with_prefix(PREFIX).unwrap();
    let traced = |verb: &str| {
        let out = call("bridge", verb, &net.host, Some(&container), &net.conf())
            .env("TRACEPARENT", TRACEPARENT)
            .run();
        assert!(out.success(), "{verb}: {} {}\n{}", out.stdout, out.stderr, net.log("daemon.log"));
        out
    };
    let result = traced("ADD").json();
    traced("DEL");
    let log = net.log("daemon.log");
    let leased = format!("leased lease={}", address(&result));
    let line = |start: &str| log.lines().find(|l| l.contains(start)).map(str::to_string);
    let trace = "trace=4bf92f3577b34da6a3ce929d0e0e4736";
    assert!(line(&leased).is_some_and(|l| l.contains(trace)), "{log}");
    assert!(line("released lease=").is_some_and(|l| l.contains(trace)), "{log}");
}
