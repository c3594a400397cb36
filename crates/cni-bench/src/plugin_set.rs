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

/// Our plugins built as binaries of their own (`cargo build-etcd-ipam`, `cargo
/// build-dhcp`), looked for beside the multi-call binary.
pub const OWN_BINARIES: [&str; 2] = ["etcd-ipam", "dhcp"];

impl PluginSet {
    pub fn from_dir(label: &'static str, dir: PathBuf) -> Result<PluginSet> {
        if !dir.is_dir() {
            return Err(BenchError::Plugin(format!("plugin directory {} does not exist", dir.display())));
        }
        Ok(PluginSet { label, dir, _installed: None })
    }

    /// Installs the multi-call binary `binary` (`cni-plugins install <temp dir>`), and the
    /// [`OWN_BINARIES`] beside it when they are there (plugins of ours built on their own,
    /// as the package installs them).
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
        for name in OWN_BINARIES {
            let own = binary.with_file_name(name);
            if own.is_file() {
                std::fs::copy(&own, temp.path().join(name))
                    .map_err(|e| BenchError::io(format!("copy {}", own.display()), e))?;
            }
        }
        Ok(PluginSet { label, dir: temp.path().to_path_buf(), _installed: Some(temp) })
    }

    /// Bytes of the binary a `bridge` exec maps: for our set the multi-call binary every
    /// plugin but etcd-ipam and dhcp runs as, for the reference one plugin's own binary.
    pub fn per_exec_bytes(&self) -> Result<u64> {
        std::fs::metadata(self.binary("bridge"))
            .map(|m| m.len())
            .map_err(|e| BenchError::io("stat bridge", e))
    }

    /// How the set's bridge binary is linked: "static", "dynamic" or "unknown".
    pub fn linkage(&self) -> &'static str {
        match std::fs::read(self.binary("bridge")).ok().and_then(|elf| has_interpreter(&elf)) {
            Some(true) => "dynamic",
            Some(false) => "static",
            None => "unknown",
        }
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

/// Whether a 64-bit little-endian ELF file asks for a program interpreter (a `PT_INTERP`
/// program header), i.e. is dynamically linked; `None` if it is no such ELF file.
fn has_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let (entry_size, entries) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    let mut interpreter = false;
    for n in 0..entries {
        interpreter |= u32_at(table + n * entry_size)? == PT_INTERP;
    }
    Some(interpreter)
}

/// The release `cni-plugins` binary built next to this one (`target/release`).
pub fn sibling_plugins_binary() -> Result<PathBuf> {
    let me = std::env::current_exe().map_err(|e| BenchError::io("find own executable", e))?;
    let candidate = me.with_file_name("cni-plugins");
    if candidate.is_file() {
        return Ok(candidate);
    }
    Err(BenchError::Plugin(format!(
        "no cni-plugins binary at {} (build it with `cargo build-plugins`, or pass --a DIR / --plugins-bin FILE)",
        candidate.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linkage_is_read_from_the_program_headers() {
        // An ELF header followed by program headers of the given types (56 bytes each).
        let elf = |types: &[u32]| {
            let mut bytes = b"\x7fELF\x02\x01".to_vec();
            bytes.resize(64, 0);
            bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
            bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
            bytes[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
            for t in types {
                let mut header = vec![0u8; 56];
                header[..4].copy_from_slice(&t.to_le_bytes());
                bytes.extend(header);
            }
            bytes
        };
        assert_eq!(has_interpreter(&elf(&[6, 3, 1, 1])), Some(true));
        assert_eq!(has_interpreter(&elf(&[1, 1, 7])), Some(false));
        assert_eq!(has_interpreter(&elf(&[6, 3])[..100]), None, "truncated");
        assert_eq!(has_interpreter(b"#!/bin/sh\n"), None);
        // This test binary itself is linked dynamically.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(has_interpreter(&me), Some(true));
    }

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
