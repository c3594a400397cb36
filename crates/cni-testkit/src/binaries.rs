//! Locating the workspace's own binaries from any crate's tests.
//!
//! Cargo exposes `CARGO_BIN_EXE_*` only to the package that owns a binary, so tests in
//! other crates find it in the target directory, building it once if it is not there.

use std::path::{Path, PathBuf};
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

/// The CNI bin directory `binary` (the multi-call `cni-plugins`) installs into under
/// `root` (a test's `CARGO_TARGET_TMPDIR`: inside `target/`, never the machine's /tmp),
/// one link per plugin name, the way an operator installs it.
///
/// Named after the binary's size and mtime: every test process of one build shares it, a
/// rebuild gets a new one, and the directories of older builds are removed (their links
/// would otherwise keep every old binary alive on disk). Not the inode: the kernel rig's
/// guest sees the file over 9p, with other inode numbers, and must find the directory the
/// host made (its view is read-only).
pub fn installed_plugins(binary: &Path, root: &Path) -> PathBuf {
    installed_plugins_with(binary, &[], root)
}

/// [`installed_plugins`] with plugin binaries of their own beside the links (`dhcp`,
/// `etcd-ipam`: each installed under its file name), as the package installs them; the
/// directory's name covers their builds too. Its own directory under `root`, so that
/// tests of one build with different sets do not remove each other's.
pub fn installed_plugins_with(binary: &Path, own_binaries: &[&Path], root: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let build_of = |file: &Path| {
        let meta = std::fs::metadata(file).unwrap_or_else(|e| panic!("{} is built: {e}", file.display()));
        format!("{}-{}.{}", meta.size(), meta.mtime(), meta.mtime_nsec())
    };
    let build = std::iter::once(binary)
        .chain(own_binaries.iter().copied())
        .map(build_of)
        .collect::<Vec<_>>()
        .join("+");
    let set: Vec<String> = own_binaries.iter().map(|b| file_name(b)).collect();
    let root = root.join(if set.is_empty() {
        "cni-plugins-bin".to_string()
    } else {
        format!("cni-plugins-bin+{}", set.join("+"))
    });
    let dir = root.join(&build);
    if !dir.join("bridge").exists() {
        // Installed under a private name, then renamed: concurrent test processes never
        // see a half-filled directory, and the loser of the rename race drops its copy.
        let staging = root.join(format!("{build}.staging-{}", std::process::id()));
        let out = Command::new(binary).arg("install").arg(&staging).output().unwrap();
        assert!(out.status.success(), "install failed: {}", String::from_utf8_lossy(&out.stderr));
        for own in own_binaries {
            let target = staging.join(file_name(own));
            if std::fs::hard_link(own, &target).is_err() {
                std::fs::copy(own, &target).unwrap();
            }
        }
        if std::fs::rename(&staging, &dir).is_err() {
            std::fs::remove_dir_all(&staging).unwrap();
        }
    }
    for entry in std::fs::read_dir(&root).unwrap().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&build) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    dir
}

fn file_name(path: &Path) -> String {
    path.file_name().expect("a binary's path names a file").to_string_lossy().into_owned()
}
