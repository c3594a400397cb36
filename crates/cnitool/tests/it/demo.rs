//! `cnitool demo` end to end with our plugins: it must attach, prove connectivity, detach
//! and leave no namespace behind.

use std::process::Command;

#[test]
fn demo_attaches_proves_connectivity_and_cleans_up() {
    cni_testkit::ns::require_root();
    let plugins = cni_testkit::binaries::workspace_binary("cni-plugins", "cni-plugins");
    let bin_dir = tempfile::tempdir().unwrap();
    let status = Command::new(&plugins).arg("install").arg(bin_dir.path()).status().unwrap();
    assert!(status.success());
    let child = Command::new(env!("CARGO_BIN_EXE_cnitool"))
        .arg("demo")
        .env("CNI_PATH", bin_dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The demo names its namespaces after its pid.
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("connectivity: container 10.231.0."), "{stdout}");
    assert!(stdout.contains("-> host side of the bridge 10.231.0.1:7777 ... ok"), "{stdout}");
    assert!(stdout.contains("port mapping: host 127.0.0.1:18080 -> container :80 ... ok"), "{stdout}");
    assert!(stdout.contains("CHECK ... ok"), "{stdout}");
    for role in ["host", "ctr"] {
        let path = format!("/run/netns/cnidemo-{role}-{pid}");
        assert!(!std::path::Path::new(&path).exists(), "{path} was left behind");
    }
    assert!(stdout.contains(&format!("cnidemo-ctr-{pid}")), "{stdout}");
}
