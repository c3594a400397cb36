//! Shared by the plugin integration tests: the multi-call binary installed into a temp
//! CNI bin directory, once per test binary, the way an operator installs it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory holding one link per plugin name (and the Go-compatible names only).
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("cni-plugins-bin").tempdir().unwrap().keep();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cni-plugins"))
            .arg("install")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "install failed: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}

/// The path a runtime would run for plugin `name`.
pub fn plugin(name: &str) -> PathBuf {
    let p = plugin_dir().join(name);
    assert!(p.exists(), "plugin {name} is not installed");
    p
}
