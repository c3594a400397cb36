//! The benchmark binary runs end to end (a short library-mode run) and reports no duplicates.

#[test]
fn a_short_run_reports_both_phases_and_no_duplicates() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-ipam-bench"))
        .args(["--mode", "library", "--nodes", "3", "--per-node", "20"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all members up") && stdout.contains("60 ADDs"), "{stdout}");
    assert!(stdout.contains("one member killed"), "{stdout}");
    assert!(
        stdout.contains("duplicates: 0 in results; etcd holds 120 handles, 120 block entries"),
        "{stdout}"
    );
}
