//! What the engines' host namespace holds, read with the system tools as oracles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::engine_host::EngineHost;
use crate::process::stdout_of_success;

/// Everything a container's networking adds to its host and must take away again: the
/// nftables ruleset, the iptables view of it, and the links — normalised so that two
/// snapshots compare equal when the same rules and links exist (counters are cut).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSnapshot {
    pub nft_ruleset: String,
    pub iptables: String,
    pub links: BTreeSet<String>,
}

impl HostSnapshot {
    /// Reads the host namespace of `host`.
    pub fn take(host: &EngineHost) -> HostSnapshot {
        let netns = host.netns();
        let nft = netns.nft_text();
        let links = netns
            .ip_json(&["link", "show"])
            .as_array()
            .expect("ip -j link prints an array")
            .iter()
            .filter_map(|link| link["ifname"].as_str().map(str::to_string))
            .collect();
        HostSnapshot {
            nft_ruleset: nft.lines().map(without_nft_counters).collect::<Vec<_>>().join("\n"),
            iptables: iptables_save(host, "iptables-save"),
            links,
        }
    }

    /// Whether any rule mentions `needle` (an address, a container ID...).
    pub fn rules_mention(&self, needle: &str) -> bool {
        self.nft_ruleset.contains(needle) || self.iptables.contains(needle)
    }

    /// A readable account of how `self` differs from `other`: lines (counted, so repeated
    /// lines such as `}` show too) only in one of them, then links.
    pub fn diff(&self, other: &HostSnapshot) -> String {
        let mut out = String::new();
        for (what, a, b) in
            [("nft", &self.nft_ruleset, &other.nft_ruleset), ("iptables", &self.iptables, &other.iptables)]
        {
            let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
            a.lines().for_each(|line| *counts.entry(line).or_default() -= 1);
            b.lines().for_each(|line| *counts.entry(line).or_default() += 1);
            for (line, count) in counts.into_iter().filter(|(_, count)| *count != 0) {
                let sign = if count < 0 { '-' } else { '+' };
                out.push_str(&format!("{what} {sign}{} {line}\n", count.abs()));
            }
        }
        for link in self.links.difference(&other.links) {
            out.push_str(&format!("link - {link}\n"));
        }
        for link in other.links.difference(&self.links) {
            out.push_str(&format!("link + {link}\n"));
        }
        out
    }
}

/// What `program` (`iptables-save` or `ip6tables-save`) prints in the host's namespace,
/// without comments and counters.
pub fn iptables_save(host: &EngineHost, program: &str) -> String {
    let saved = stdout_of_success(&mut host.netns().command(program), program);
    saved
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(without_iptables_counters)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `counter packets 3 bytes 180` → `counter`.
fn without_nft_counters(line: &str) -> String {
    let mut words = Vec::new();
    let mut iter = line.split_whitespace().peekable();
    while let Some(word) = iter.next() {
        words.push(word);
        if word == "counter" && iter.peek() == Some(&"packets") {
            // Skip "packets N bytes M".
            for _ in 0..4 {
                iter.next();
            }
        }
    }
    words.join(" ")
}

/// `:FORWARD ACCEPT [12:720]` → `:FORWARD ACCEPT`.
fn without_iptables_counters(line: &str) -> String {
    line.split_whitespace()
        .filter(|w| !(w.starts_with('[') && w.ends_with(']') && w.contains(':')))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The addresses host-local has allocated in `data_dir/<network>` (its on-disk layout:
/// one file per allocated address, plus `lock` and `last_reserved_ip.<n>`).
pub fn host_local_allocations(data_dir: &Path, network: &str) -> BTreeSet<String> {
    let dir = data_dir.join(network);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeSet::new();
    };
    entries
        .map(|entry| entry.expect("read host-local data dir").file_name().to_string_lossy().into_owned())
        .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_cut() {
        assert_eq!(
            without_nft_counters("\tip saddr 10.88.0.2 counter packets 3 bytes 180 jump CNI-x"),
            "ip saddr 10.88.0.2 counter jump CNI-x"
        );
        assert_eq!(without_iptables_counters(":FORWARD ACCEPT [12:720]"), ":FORWARD ACCEPT");
        assert_eq!(
            without_iptables_counters("-A X -d 10.0.0.1/32 -j ACCEPT"),
            "-A X -d 10.0.0.1/32 -j ACCEPT"
        );
    }
}
