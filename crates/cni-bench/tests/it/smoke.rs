//! The CI smoke run: `cni-bench --smoke` against our plugins (and the Go reference plugins
//! when /usr/lib/cni holds them) completes, writes well-formed JSON with every workload,
//! none of our runs fails, and no namespace is left behind. No timing is asserted.
//! Needs root (it creates network namespaces).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const WORKLOADS: [&str; 10] = ["W1", "W1nm", "W2", "W3", "W4", "W5", "W6", "W7", "nft", "macvlan"];

#[test]
fn smoke_run_completes_with_well_formed_json() {
    assert!(cni_os::is_root(), "this test needs root: it creates network namespaces");
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    let out_dir = tempfile::tempdir().unwrap();
    let json_path = out_dir.path().join("bench.json");

    let mut command = Command::new(env!("CARGO_BIN_EXE_cni-bench"));
    command.arg("--smoke").arg("--plugins-bin").arg(&plugins).arg("--json").arg(&json_path);
    let with_go = Path::new("/usr/lib/cni/bridge").is_file();
    if !with_go {
        command.arg("--only-a");
    }
    let child =
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cni-bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("| workload | operation |"), "no table printed:\n{stdout}");

    let document: Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).expect("well-formed JSON");
    assert_eq!(document["meta"]["containers"], 20);
    assert_eq!(document["meta"]["rounds_done"], 1);
    let workloads = document["workloads"].as_array().expect("workloads array");
    let ids: Vec<&str> = workloads.iter().filter_map(|w| w["id"].as_str()).collect();
    assert_eq!(ids, WORKLOADS);
    for workload in workloads {
        let sets = workload["sets"].as_array().unwrap();
        assert_eq!(sets.len(), if with_go { 2 } else { 1 }, "{workload}");
        for set in sets {
            check_outcome(workload["id"].as_str().unwrap(), set);
        }
    }
    check_outcome("floor", &document["floor"]);
    assert_eq!(document["floor"]["status"], "ran", "the floor needs no plugin: {}", document["floor"]);
    assert!(document["goals"].as_array().is_some_and(|g| !g.is_empty()));

    let leftovers: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("cnk-h{pid}-")) || n.starts_with(&format!("cnk-c{pid}-")))
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "namespaces left behind: {leftovers:?}");
}

/// A set either ran (with timed operations) or was skipped for a missing plugin; our own
/// set (A) never fails. Go's (B) may fail on a host it does not suit; that is reported.
fn check_outcome(workload: &str, set: &Value) {
    let label = set["label"].as_str().unwrap_or_default();
    match set["status"].as_str() {
        Some("ran") => {
            let ops = set["operations"].as_object().expect("operations object");
            assert!(!ops.is_empty(), "{workload} {label}: no operations");
            for (name, op) in ops {
                let count = op["summary"]["count"].as_u64().unwrap_or(0);
                assert!(count > 0, "{workload} {label} {name}: no samples");
                let samples = op["samples_us"].as_array().expect("samples");
                assert_eq!(samples.len() as u64, count);
                for key in ["median_ms", "p90_ms", "p99_ms", "throughput_per_s"] {
                    assert!(
                        op["summary"][key].as_f64().is_some_and(|v| v > 0.0),
                        "{workload} {label} {name} {key}"
                    );
                }
            }
        }
        Some("skipped") => {
            // A missing plugin, or B of a workload that measures our library alone.
            let reason = set["reason"].as_str().unwrap_or_default();
            let library_only = workload == "nft" && label == "B";
            assert!(
                reason.starts_with("skipped: plugin ")
                    || library_only && reason.starts_with("skipped: measures"),
                "{workload} {label}: {reason}"
            );
        }
        Some("failed") if label == "B" => eprintln!("{workload} B failed: {}", set["reason"]),
        other => panic!("{workload} {label}: status {other:?}: {}", set["reason"]),
    }
}

/// The podman workload (only when named) starts real containers with podman's CNI backend
/// on our plugins and with netavark, and derives each stack's share of a container start.
#[test]
fn podman_workload_runs_both_stacks_and_reports_the_network_share() {
    let document = run_bench(&["--workloads", "podman", "-n", "2", "--rounds", "1", "--only-a"]);
    let set = &document["workloads"][0]["sets"][0];
    check_outcome("podman", set);
    assert_eq!(set["status"], "ran", "{set}");
    let ops = set["operations"].as_object().unwrap();
    for op in [
        "run --rm, bridge",
        "run --rm, bridge -p",
        "run --rm, --network none",
        "8 concurrent runs",
        "netavark: run --rm, bridge",
        "netavark: run --rm, bridge -p",
        "netavark: 8 concurrent runs",
    ] {
        assert!(ops.contains_key(op), "no {op:?} in {:?}", ops.keys().collect::<Vec<_>>());
    }
    for share in ["network_share", "netavark_network_share"] {
        let value = set["facts"][share].as_f64().unwrap_or(-1.0);
        assert!((0.0..1.0).contains(&value), "{share} = {value} in {set}");
    }
}

/// Runs cni-bench with `args` on our plugins (as root: it makes namespaces), asserts it
/// succeeded and returns the JSON document it wrote.
fn run_bench(args: &[&str]) -> Value {
    cni_testkit::ns::require_root();
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    let out_dir = tempfile::tempdir().unwrap();
    let json_path = out_dir.path().join("bench.json");
    let output = Command::new(env!("CARGO_BIN_EXE_cni-bench"))
        .args(args)
        .arg("--plugins-bin")
        .arg(&plugins)
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cni-bench failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let document: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    document
}

/// The cri workload (only when named) drives containerd's CRI plugin on our plugins and on
/// the Go reference, times RunPodSandbox with and without a network, and derives the
/// network's share of a sandbox start for each.
#[test]
fn cri_workload_times_run_pod_sandbox_on_both_sets() {
    let document = run_bench(&["--workloads", "cri", "-n", "2", "--rounds", "1", "--b", "/usr/lib/cni"]);
    for set in document["workloads"][0]["sets"].as_array().unwrap() {
        check_outcome("cri", set);
        assert_eq!(set["status"], "ran", "{set}");
        let ops = set["operations"].as_object().unwrap();
        for op in ["RunPodSandbox, hostPort + bandwidth", "RunPodSandbox, hostNetwork"] {
            assert!(ops.contains_key(op), "no {op:?} in {:?}", ops.keys().collect::<Vec<_>>());
        }
        let share = set["facts"]["network_share"].as_f64().unwrap_or(-1.0);
        assert!(share < 1.0, "network_share = {share} in {set}");
    }
}
