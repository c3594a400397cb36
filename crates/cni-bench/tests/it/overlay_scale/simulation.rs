//! The simulation end to end at 8 nodes: it converges (every node's kernel holding exactly
//! its peers' entries, from netlink dumps), measures joins, leaves and etcd's load, and
//! leaves nothing behind, also when interrupted or when its agents cannot start. Needs root and Debian's etcd-server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cni_bench::overlay_scale::{run, Error, Options};
use cni_testkit::binaries::workspace_binary;

/// The simulation's namespaces still present (`sch-*` nodes, `scu-*` underlays).
fn leftover_namespaces() -> Vec<String> {
    let names = std::fs::read_dir("/run/netns").map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    names
        .into_iter()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sch-") || n.starts_with("scu-"))
        .collect()
}

fn options(nodes: usize, stop: &AtomicBool) -> Options<'_> {
    Options {
        nodes,
        joins: 2,
        steady: Duration::from_secs(3),
        ttl: 3,
        agent_binary: workspace_binary("cni-overlay", "cni-overlay-agent"),
        limit: Duration::from_secs(60),
        stop,
    }
}

// One test: the runs' leftovers are looked for by the `sc` names, so they must not overlap.
#[test]
fn eight_nodes_converge_and_an_interrupted_or_failed_run_leaves_nothing() {
    let stop = AtomicBool::new(false);
    let report = run(&options(8, &stop)).unwrap_or_else(|e| panic!("8-node simulation: {e}"));
    assert_eq!((report.nodes, report.joins.len(), report.leaves.len()), (8, 2, 2), "{report:?}");
    assert!(report.cold_start > Duration::ZERO && report.round > Duration::ZERO, "{report:?}");
    let first_before_all = report.first_peers.iter().zip(&report.joins).all(|(first, all)| first <= all);
    assert!(first_before_all && report.first_peers.len() == 2, "{report:?}");
    // A TTL of 3 s is renewed every second: the steady window saw keep-alives and, the
    // agents watching, nothing else.
    assert!(report.steady_keepalives > 0.0, "no keep-alive reached etcd: {report:?}");
    assert_eq!(
        report.steady_requests, report.steady_keepalives,
        "steady requests beyond keep-alives: {report:?}"
    );
    // A join: the joiner's grant, claim, listing and watch; its 7 peers hear of it on
    // their watches.
    assert!(report.join_requests >= 3.0, "{report:?}");
    assert!(report.join_watch_messages >= 7.0, "{report:?}");
    assert!(report.join_cpu > Duration::ZERO, "the peers did no work for a join: {report:?}");
    assert!(report.steady_cpu > Duration::ZERO, "{report:?}");
    assert!(report.rss_mean_kib > 0 && report.rss_max_kib >= report.rss_mean_kib, "{report:?}");
    assert!(leftover_namespaces().is_empty(), "left behind: {:?}", leftover_namespaces());
    assert!(cni_testkit::children::of_this_thread().is_empty(), "processes left behind");

    // Interrupted while its agents run (the steady window alone lasts longer than the
    // wait): the run stops with an error and removes every namespace and process.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(1500));
            stop.store(true, Ordering::SeqCst);
        });
        stop.store(false, Ordering::SeqCst);
        let mut long = options(4, &stop);
        long.steady = Duration::from_secs(60);
        let outcome = run(&long);
        assert!(matches!(outcome, Err(Error::Interrupted)), "{outcome:?}");
    });
    assert!(leftover_namespaces().is_empty(), "left behind: {:?}", leftover_namespaces());
    assert!(cni_testkit::children::of_this_thread().is_empty(), "processes left behind");

    // An agent that can never start is started again as a supervisor would, up to the
    // cap; then the run fails naming the node and the end of its log, and cleans up.
    let dir = tempfile::Builder::new().prefix("sc-broken-").tempdir().unwrap();
    let broken = dir.path().join("cni-overlay-agent");
    std::fs::write(&broken, "#!/bin/sh\necho 'cni-overlay-agent: no etcd here' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    stop.store(false, Ordering::SeqCst);
    let mut failing = options(2, &stop);
    failing.agent_binary = broken;
    let error = run(&failing).unwrap_err().to_string();
    assert!(error.contains("exited 6 times") && error.contains("no etcd here"), "{error}");
    assert!(leftover_namespaces().is_empty(), "left behind: {:?}", leftover_namespaces());
    assert!(cni_testkit::children::of_this_thread().is_empty(), "processes left behind");
}
