//! Shared helpers for the nftables integration tests: every test runs in its own
//! throwaway network namespace, on a thread that entered it with `unshare(CLONE_NEWNET)`.
//! The namespace disappears with the thread, so nothing is left behind (also on panic),
//! and the machine's own ruleset is never touched.

use std::process::Command;

use serde_json::Value;

/// Panics (fails the test) unless running as root: these tests need CAP_NET_ADMIN.
pub fn require_root() {
    assert!(cni_os::is_root(), "nftables integration tests must run as root");
}

/// Runs `f` on a new thread inside a fresh, empty network namespace and returns its
/// result; a panic in `f` fails the caller.
pub fn in_fresh_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    require_root();
    std::thread::spawn(move || {
        // Moves only this thread, which ends after `f`.
        cni_os::namespace::unshare_network().expect("unshare(CLONE_NEWNET)");
        f()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `nft -j list ruleset` of the current thread's namespace (the child inherits it).
pub fn nft_ruleset() -> Value {
    let out = Command::new("nft")
        .args(["-j", "list", "ruleset"])
        .output()
        .expect("run nft (apt-get install nftables)");
    assert!(out.status.success(), "nft failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("nft -j output is JSON")
}

/// The JSON objects of one kind (`table`, `chain`, `rule`, `set`, `map`) in a ruleset.
pub fn objects<'a>(ruleset: &'a Value, kind: &str) -> Vec<&'a Value> {
    ruleset["nftables"].as_array().expect("nftables array").iter().filter_map(|item| item.get(kind)).collect()
}

/// The rules of one chain, as nft shows them.
pub fn chain_rules(ruleset: &Value, table: &str, chain: &str) -> Vec<Value> {
    objects(ruleset, "rule")
        .into_iter()
        .filter(|r| r["table"] == table && r["chain"] == chain)
        .cloned()
        .collect()
}

/// `nft list ruleset` as text, for failure messages.
pub fn nft_text() -> String {
    let out = Command::new("nft").args(["list", "ruleset"]).output().expect("run nft");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Brings `lo` up in the current namespace (over a netlink socket made in it).
pub fn loopback_up() {
    let mut netlink = cni_net::Netlink::new().expect("netlink socket");
    let lo = netlink.require_link("lo").expect("lo");
    netlink.set_link_up(lo.index).expect("lo up");
}

/// Adds to `batch` an inet NAT base chain `name` of `table` on `hook`, at the priority NAT
/// takes there (source NAT after routing, destination NAT before it and on output).
pub fn add_nat_chain(batch: &mut cni_net::nft::Batch, table: &str, name: &str, hook: cni_net::nft::Hook) {
    use cni_net::nft::{priority, Chain, ChainType, Family, Hook};
    let priority = if hook == Hook::Postrouting { priority::SRCNAT } else { priority::DSTNAT };
    batch.add_chain(&Chain::base(Family::Inet, table, name, ChainType::Nat, hook, priority));
}
