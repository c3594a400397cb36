//! The benchmark binary runs end to end and reports no duplicates: a short library-mode run
//! losing a follower, and a short run of plugin processes through one agent per node
//! losing the leader.
use std::path::Path;

#[test]
fn keeps_the_command_line_conventions() {
    cni_testkit::cli::assert_conventions(
        Path::new(env!("CARGO_BIN_EXE_etcd-ipam-bench")),
        &[],
        "etcd-ipam-bench",
    );
}

#[test]
fn a_short_run_losing_a_follower_reports_both_phases_and_no_duplicates() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-ipam-bench"))
        .args(["--mode", "library", "--nodes", "3", "--per-node", "20", "--kill", "follower"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all members up") && stdout.contains("60 ADDs"), "{stdout}");
    assert!(stdout.contains("follower (member") && stdout.contains("whole run"), "{stdout}");
    assert!(
        stdout.contains("duplicates: 0 in results; etcd holds 120 handles, 120 block entries"),
        "{stdout}"
    );
}

#[test]
fn plugin_processes_through_agents_lose_the_leader_mid_run_without_duplicates() {
    let plugin = cni_testkit::binaries::fresh_workspace_binary("cni-etcd-ipam", "etcd-ipam");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-ipam-bench"))
        .args(["--mode", "agent", "--nodes", "3", "--per-node", "16", "--parallel", "2", "--plugin-bin"])
        .arg(plugin)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("through its node's agent") && stdout.contains("fsyncs"), "{stdout}");
    assert!(stdout.contains("leader (member") && stdout.contains("whole run"), "{stdout}");
    // The operator's view of the stall and of etcd's load.
    assert!(stdout.contains("finished per second: ") && stdout.contains(", member killed at "), "{stdout}");
    assert!(stdout.contains("etcd requests per ADD: ") && stdout.contains("(Txn "), "{stdout}");
    // Every successful ADD is in etcd, once, and a failed one (while the leader is
    // re-elected) left nothing there: the bench exits with a failure otherwise.
    assert!(stdout.contains("duplicates: 0 in results"), "{stdout}");
}
