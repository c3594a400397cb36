//! The CI soak: `cni-bench --workloads soak -n 50 --only-a`, 8 workers x 50 ADD/DEL cycles
//! of the podman chain against our plugins, must end with every cycle done, no address
//! held twice at any moment, no error and nothing left (host veths, reservations, libcni
//! cache entries, nftables entries). The full 10,000-cycle soak is `-n 1250` with the
//! release build (docs/benchmarks.md). No timing is asserted. Needs root.

use serde_json::Value;
use std::process::Command;

const CYCLES_PER_WORKER: u64 = 50;
const WORKERS: u64 = 8;

#[test]
fn eight_workers_churn_with_no_duplicate_no_error_and_no_leak() {
    assert!(cni_os::is_root(), "this test needs root: it creates network namespaces");
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    let out_dir = tempfile::Builder::new().prefix("ks-soak-").tempdir().unwrap();
    let json_path = out_dir.path().join("soak.json");
    let output = Command::new(env!("CARGO_BIN_EXE_cni-bench"))
        .args(["--workloads", "soak", "--only-a", "-n", &CYCLES_PER_WORKER.to_string()])
        .arg("--plugins-bin")
        .arg(&plugins)
        .arg("--state-dir")
        .arg(out_dir.path())
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cni-bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let document: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let workload = &document["workloads"][0];
    assert_eq!(workload["id"], "soak");
    let set = &workload["sets"][0];
    assert_eq!(set["status"], "ran", "{set}\n{stdout}");
    let facts = &set["facts"];
    assert_eq!(facts["cycles"], WORKERS * CYCLES_PER_WORKER, "{facts}");
    for key in [
        "duplicate_ips",
        "errors",
        "leaked_host_veths",
        "leaked_reservations",
        "leaked_cache_entries",
        "leaked_ruleset_entries",
        "container_namespaces_left_dirty",
    ] {
        assert!(facts[key].as_u64().unwrap_or(0) == 0, "{key}: {facts}");
        if key != "container_namespaces_left_dirty" {
            assert!(facts.get(key).is_some(), "{key} was not counted: {facts}");
        }
    }
    assert!(facts["cycles_per_second"].as_f64().is_some_and(|v| v > 0.0), "{facts}");
    println!("{stdout}");
}
