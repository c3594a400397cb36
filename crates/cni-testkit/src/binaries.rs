//! Locating the workspace's own binaries from any crate's tests.
//!
//! Cargo exposes `CARGO_BIN_EXE_*` only to the package that owns a binary, so tests in
//! other crates find it in the target directory, building it once if it is not there.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The target directory of the running test (`target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary has a parent dir");
    // Integration and unit test binaries live in `<profile>/deps`.
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Path of binary `bin` of workspace package `package`, built with `cargo build` when it
/// is missing (e.g. when only one crate's tests are run).
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    let path = target_dir().join(bin);
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let release = target_dir().file_name().is_some_and(|n| n == "release");
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args(["build", "-p", package, "--bin", bin]);
        if release {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("running cargo build");
        assert!(status.success(), "cargo build -p {package} --bin {bin} failed");
    }
    assert!(path.exists(), "{} not found after building", path.display());
    path
}

/// Like [`workspace_binary`], but built (or found up to date) by cargo first even when a
/// file is there: for a test whose point is what another package's binary contains now.
pub fn fresh_workspace_binary(package: &str, bin: &str) -> PathBuf {
    let path = target_dir().join(bin);
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.args(["build", "-p", package, "--bin", bin]);
    if target_dir().file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("running cargo build");
    assert!(status.success(), "cargo build -p {package} --bin {bin} failed");
    path
}

/// The scriptable test plugin binary.
pub fn test_plugin() -> PathBuf {
    workspace_binary("cni-testkit", "cni-test-plugin")
}
