//! The plugin directories under test: A (ours) and optionally B (the Go reference).

use crate::error::{BenchError, Result};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One directory of plugin binaries.
#[derive(Debug)]
pub struct PluginSet {
    /// "A" or "B".
    pub label: &'static str,
    pub dir: PathBuf,
    /// Keeps an installed temp copy alive.
    _installed: Option<tempfile::TempDir>,
}

impl PluginSet {
    pub fn from_dir(label: &'static str, dir: PathBuf) -> Result<PluginSet> {
        if !dir.is_dir() {
            return Err(BenchError::Plugin(format!("plugin directory {} does not exist", dir.display())));
        }
        Ok(PluginSet { label, dir, _installed: None })
    }

    /// Installs the multi-call binary `binary` (`cni-plugins install <temp dir>`).
    pub fn install(label: &'static str, binary: &Path) -> Result<PluginSet> {
        let temp = tempfile::Builder::new()
            .prefix("cnk-bench-plugins-")
            .tempdir()
            .map_err(|e| BenchError::io("create temp plugin dir", e))?;
        let output = Command::new(binary)
            .arg("install")
            .arg(temp.path())
            .output()
            .map_err(|e| BenchError::io(format!("run {} install", binary.display()), e))?;
        if !output.status.success() {
            return Err(BenchError::Plugin(format!(
                "{} install failed: {}",
                binary.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(PluginSet { label, dir: temp.path().to_path_buf(), _installed: Some(temp) })
    }

    pub fn binary(&self, plugin: &str) -> PathBuf {
        self.dir.join(plugin)
    }

    /// The plugins of `needed` this directory lacks.
    pub fn missing<'a>(&self, needed: &[&'a str]) -> Vec<&'a str> {
        needed.iter().copied().filter(|p| !self.binary(p).is_file()).collect()
    }

    /// `skipped: plugin X missing in dir A (...)`, when something is missing.
    pub fn skip_reason(&self, needed: &[&str]) -> Option<String> {
        let missing = self.missing(needed);
        (!missing.is_empty()).then(|| {
            format!(
                "skipped: plugin {} missing in dir {} ({})",
                missing.join(", "),
                self.label,
                self.dir.display()
            )
        })
    }

    /// Names of the plugin files, sorted.
    pub fn plugin_names(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| BenchError::io(format!("read {}", self.dir.display()), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.path().is_file() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Bytes on disk of the whole set: every distinct file counted once (hard links to
    /// one multi-call binary count as one binary).
    pub fn size_bytes(&self) -> Result<u64> {
        let mut seen = HashSet::new();
        let mut total = 0;
        for name in self.plugin_names()? {
            let meta = std::fs::metadata(self.binary(&name))
                .map_err(|e| BenchError::io(format!("stat {name}"), e))?;
            if seen.insert((meta.dev(), meta.ino())) {
                total += meta.len();
            }
        }
        Ok(total)
    }
}

/// The release `cni-plugins` binary built next to this one (`target/release`).
pub fn sibling_plugins_binary() -> Result<PathBuf> {
    let me = std::env::current_exe().map_err(|e| BenchError::io("find own executable", e))?;
    let candidate = me.with_file_name("cni-plugins");
    if candidate.is_file() {
        return Ok(candidate);
    }
    Err(BenchError::Plugin(format!(
        "no cni-plugins binary at {} (build it with `cargo build --release -p cni-plugins`, or pass --a DIR / --plugins-bin FILE)",
        candidate.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_links_count_once_and_missing_plugins_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bridge"), vec![0u8; 1000]).unwrap();
        std::fs::hard_link(dir.path().join("bridge"), dir.path().join("portmap")).unwrap();
        std::fs::write(dir.path().join("tuning"), vec![0u8; 10]).unwrap();
        let set = PluginSet::from_dir("A", dir.path().to_path_buf()).unwrap();
        assert_eq!(set.size_bytes().unwrap(), 1010);
        assert_eq!(set.plugin_names().unwrap(), vec!["bridge", "portmap", "tuning"]);
        assert_eq!(set.missing(&["bridge", "host-local", "firewall"]), vec!["host-local", "firewall"]);
        let reason = set.skip_reason(&["host-local"]).unwrap();
        assert!(reason.starts_with("skipped: plugin host-local missing in dir A"), "{reason}");
        assert!(set.skip_reason(&["bridge"]).is_none());
    }
}
