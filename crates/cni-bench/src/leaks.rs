//! What a run may leave behind on its host: IP reservations, links, firewall state.

use crate::error::{BenchError, Result};
use cni_net::netlink::LinkKind;
use cni_net::Netlink;
use serde_json::Value;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

/// IP reservation files host-local keeps in `<data_dir>/<network>/`.
pub fn reservations(data_dir: &Path, network: &str) -> Result<usize> {
    let dir = data_dir.join(network);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(BenchError::io(format!("read {}", dir.display()), e)),
    };
    Ok(entries.flatten().filter(|e| e.file_name().to_string_lossy().parse::<IpAddr>().is_ok()).count())
}

/// How long teardown that plugins hand to background processes may take before what is
/// left counts as leaked: our bridge and ptp DEL take the container end out of service
/// and leave the veth pair's deletion (~20 ms of kernel time) to a detached process.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Re-evaluates `done` every 5 ms until it holds or `deadline` passes; returns its last
/// answer.
pub fn settled(deadline: std::time::Instant, mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    loop {
        if done()? {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// veth links in the calling thread's network namespace.
pub fn veth_links() -> Result<usize> {
    let mut netlink = Netlink::new().map_err(|e| BenchError::setup("open netlink in host namespace", e))?;
    let links = netlink.links().map_err(|e| BenchError::setup("list host links", e))?;
    Ok(links.iter().filter(|l| l.kind == LinkKind::Veth).count())
}

/// Rules plus set/map elements in the calling thread's namespace's nftables ruleset (this
/// also sees iptables-nft rules), read with `nft -j list ruleset` as an outside oracle.
/// `None` when `nft` cannot be run here.
pub fn ruleset_entries() -> Option<usize> {
    ruleset_lines().map(|lines| lines.len())
}

/// The same entries one line each (rule handles left out), to name what was left behind.
pub fn ruleset_lines() -> Option<Vec<String>> {
    let output = Command::new("nft").args(["-j", "list", "ruleset"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let json: Value = serde_json::from_slice(&output.stdout).ok()?;
    Some(entry_lines(&json))
}

/// One line per `rule` object and per element of every `set`/`map` in `nft -j` output.
fn entry_lines(json: &Value) -> Vec<String> {
    let Some(items) = json.get("nftables").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for item in items {
        if let Some(rule) = item.get("rule") {
            let mut rule = rule.clone();
            if let Some(fields) = rule.as_object_mut() {
                fields.remove("handle");
            }
            lines.push(format!("rule {rule}"));
        } else if let Some(set) = item.get("set").or_else(|| item.get("map")) {
            for elem in set.get("elem").and_then(Value::as_array).into_iter().flatten() {
                lines.push(format!("element {} {} {elem}", set["table"], set["name"]));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_rules_and_elements() {
        let listing = json!({"nftables": [
            {"metainfo": {}},
            {"table": {"family": "inet", "name": "t"}},
            {"chain": {"name": "c"}},
            {"rule": {"chain": "c"}},
            {"rule": {"chain": "c"}},
            {"set": {"name": "s", "elem": ["10.0.0.1", "10.0.0.2"]}},
            {"map": {"name": "m", "elem": [[80, "10.0.0.1"]]}},
            {"set": {"name": "empty"}},
        ]});
        assert_eq!(entry_lines(&listing).len(), 5);
        assert!(entry_lines(&json!({})).is_empty());
    }

    #[test]
    fn reservations_are_ip_named_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("net");
        std::fs::create_dir(&net).unwrap();
        for name in ["10.0.0.2", "10.0.0.3", "lock", "last_reserved_ip.0", "fd00::2"] {
            std::fs::write(net.join(name), "x").unwrap();
        }
        assert_eq!(reservations(dir.path(), "net").unwrap(), 3);
        assert_eq!(reservations(dir.path(), "missing").unwrap(), 0);
    }
}
