//! Hermetic places to run plugins: a throwaway host namespace per run and a pool of
//! container namespaces, all made before any timing starts and removed afterwards (also
//! when a run fails or panics, by their guards). Names carry the `cnk` prefix and the
//! process id, so parallel runs never collide.

use crate::error::{BenchError, Result};
use cni_net::netns::{remove_named, OwnedNamedNs, DEFAULT_NETNS_DIR};
use cni_net::{NetNs, Netlink};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT_HOST: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace, removed when dropped.
#[derive(Debug)]
pub struct OwnedNetns {
    owned: OwnedNamedNs,
}

impl OwnedNetns {
    pub fn create(name: &str) -> Result<OwnedNetns> {
        let owned = OwnedNamedNs::create(DEFAULT_NETNS_DIR, name)
            .map_err(|e| BenchError::setup(format!("create network namespace {name}"), e))?;
        Ok(OwnedNetns { owned })
    }

    pub fn ns(&self) -> &NetNs {
        self.owned.netns()
    }

    pub fn path_str(&self) -> String {
        self.owned.path().display().to_string()
    }

    /// Runs `f` on a thread inside this namespace: processes it spawns (plugins) start
    /// there, so what they do to "the host" happens in this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        self.ns().run(f).map_err(|e| BenchError::setup(format!("enter {}", self.owned.path().display()), e))
    }
}

/// The directory a whole bench run keeps its on-disk state in: a fresh subdirectory of
/// `parent`, created if needed, removed with everything in it when dropped.
pub fn state_root(parent: &Path) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(parent).map_err(|e| BenchError::io(format!("create {}", parent.display()), e))?;
    tempfile::Builder::new()
        .prefix("cni-bench-")
        .tempdir_in(parent)
        .map_err(|e| BenchError::io(format!("create a state dir in {}", parent.display()), e))
}

/// A temp dir for `what` inside the run's state root.
pub fn state_dir(root: &Path, what: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("{what}-"))
        .tempdir_in(root)
        .map_err(|e| BenchError::io(format!("create temp dir for {what}"), e))
}

/// A fresh "host" for one run: its own network namespace (bridges, nftables, iptables
/// live there) and dirs for host-local's dataDir and libcni's result cache in the run's
/// state root.
pub struct BenchHost {
    pub netns: OwnedNetns,
    pub data_dir: tempfile::TempDir,
    pub cache_dir: tempfile::TempDir,
}

impl BenchHost {
    pub fn create(state_root: &Path) -> Result<BenchHost> {
        let seq = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
        let netns = OwnedNetns::create(&format!("cnk-h{}-{seq}", std::process::id()))?;
        Ok(BenchHost {
            netns,
            data_dir: state_dir(state_root, "data")?,
            cache_dir: state_dir(state_root, "cache")?,
        })
    }

    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }
}

/// Container namespaces reused by every run: a DEL leaves a container namespace as it
/// found it (only `lo`), and creating thousands of namespaces would measure the kernel's
/// namespace teardown instead of the plugins. [`ContainerPool::reset_dirty`] replaces any
/// namespace a run left something in.
pub struct ContainerPool {
    containers: Vec<OwnedNetns>,
    replaced: usize,
}

impl ContainerPool {
    pub fn create(count: usize) -> Result<ContainerPool> {
        let containers = (0..count)
            .map(|i| OwnedNetns::create(&format!("cnk-c{}-{i}", std::process::id())))
            .collect::<Result<Vec<_>>>()?;
        Ok(ContainerPool { containers, replaced: 0 })
    }

    pub fn len(&self) -> usize {
        self.containers.len()
    }

    pub fn get(&self, index: usize) -> &OwnedNetns {
        &self.containers[index]
    }

    /// Replaces every namespace that still holds more than `lo` once background teardown
    /// had [`crate::leaks::SETTLE`] to finish by a fresh one; returns how many there were
    /// (a leak of the run that just ended).
    pub fn reset_dirty(&mut self) -> Result<usize> {
        let deadline = std::time::Instant::now() + crate::leaks::SETTLE;
        let mut dirty = 0;
        for index in 0..self.containers.len() {
            if crate::leaks::settled(deadline, || is_clean(self.containers[index].ns()))? {
                continue;
            }
            dirty += 1;
            self.replaced += 1;
            let name = format!("cnk-c{}-{index}r{}", std::process::id(), self.replaced);
            // The old namespace is removed when the assignment drops it.
            self.containers[index] = OwnedNetns::create(&name)?;
        }
        Ok(dirty)
    }
}

/// True when the namespace has no link but `lo`.
fn is_clean(ns: &NetNs) -> Result<bool> {
    let mut netlink = Netlink::in_ns(ns).map_err(|e| BenchError::setup("open netlink in container", e))?;
    let links = netlink.links().map_err(|e| BenchError::setup("list container links", e))?;
    Ok(links.iter().all(|l| l.name == "lo"))
}

/// Removes `cnk-h<pid>-*` / `cnk-c<pid>-*` namespaces of earlier runs whose process is
/// gone (killed with SIGKILL, say), so they do not pile up.
pub fn remove_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir(DEFAULT_NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            if let Err(e) = remove_named(entry.path()) {
                eprintln!("cni-bench: cannot remove stale namespace {name}: {e}");
            }
        }
    }
}

/// The pid in a bench namespace name (`cnk-h123-0`, `cnk-c123-7`, `cnk-c123-7r2`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("cnk-h").or_else(|| name.strip_prefix("cnk-c"))?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() || !tail.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bench_names_have_an_owner() {
        assert_eq!(owner_pid("cnk-h123-0"), Some(123));
        assert_eq!(owner_pid("cnk-c77-19r2"), Some(77));
        assert_eq!(owner_pid("cnk-prof-h"), None);
        assert_eq!(owner_pid("cnk-c77-"), None);
        assert_eq!(owner_pid("cni-1234"), None);
    }
}
