//! The reference's iptables layout as text: what `iptables-save` shows of it, and the
//! `iptables-restore --noflush` scripts that add or remove exactly the missing or present
//! pieces. Pure functions, so every decision is unit-tested without a kernel.
//!
//! ```text
//! -A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! -A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//! -A CNI-FORWARD -d 10.88.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//! -A CNI-FORWARD -s 10.88.0.5/32 -j ACCEPT
//! # ingressPolicy same-bridge / isolated (per bridge, kept after DEL as the reference does):
//! -A FORWARD -m comment --comment "CNI firewall plugin rules (ingressPolicy: same-bridge)" -j CNI-ISOLATION-STAGE-1
//! -A CNI-ISOLATION-STAGE-1 -i cni0 ! -o cni0 -m comment --comment "..." -j CNI-ISOLATION-STAGE-2
//! -A CNI-ISOLATION-STAGE-1 -m comment --comment "..." -j RETURN
//! -A CNI-ISOLATION-STAGE-2 -o cni0 -m comment --comment "..." -j DROP
//! -A CNI-ISOLATION-STAGE-2 -m comment --comment "..." -j RETURN
//! ```
//! The rule texts are written exactly as `iptables-save` prints them, so that presence
//! is a string comparison and rules made by the Go plugin are recognised (and vice versa).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use crate::meta::firewall::config::IngressPolicy;

pub const PRIVATE_CHAIN: &str = "CNI-FORWARD";
pub const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
pub const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const FORWARD: &str = "FORWARD";
const ISOLATION_COMMENT: &str = "\"CNI firewall plugin rules (ingressPolicy: same-bridge)\"";
const ICC_COMMENT: &str = "\"CNI firewall plugin rules (ingressPolicy: isolated)\"";

/// The filter table as `iptables-save -t filter` printed it: chains and their rules
/// (each rule without the `-A <chain>` prefix, whitespace-normalised).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterState {
    chains: HashSet<String>,
    rules: HashMap<String, Vec<String>>,
}

fn normalise(rule: &str) -> String {
    rule.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl FilterState {
    /// Parses the `*filter` section of `iptables-save` output.
    pub fn parse(save: &str) -> FilterState {
        let mut state = FilterState::default();
        let mut in_filter = false;
        for line in save.lines().map(str::trim) {
            if let Some(table) = line.strip_prefix('*') {
                in_filter = table == "filter";
            } else if !in_filter || line.is_empty() || line.starts_with('#') || line == "COMMIT" {
                continue;
            } else if let Some(decl) = line.strip_prefix(':') {
                if let Some(name) = decl.split_whitespace().next() {
                    state.chains.insert(name.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("-A ") {
                if let Some((chain, rule)) = rest.split_once(' ') {
                    state.rules.entry(chain.to_string()).or_default().push(normalise(rule));
                }
            }
        }
        state
    }

    pub fn has_chain(&self, chain: &str) -> bool {
        self.chains.contains(chain)
    }

    pub fn has_rule(&self, chain: &str, rule: &str) -> bool {
        self.rules.get(chain).is_some_and(|rules| rules.iter().any(|r| *r == normalise(rule)))
    }
}

pub fn forward_jump() -> String {
    format!("-m comment --comment \"CNI firewall plugin rules\" -j {PRIVATE_CHAIN}")
}

pub fn admin_jump(admin_chain: &str) -> String {
    format!("-m comment --comment \"CNI firewall plugin admin overrides\" -j {admin_chain}")
}

/// The two per-address rules of the reference: replies in, everything out.
pub fn address_rules(ip: IpAddr) -> [String; 2] {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    [
        format!("-d {ip}/{prefix} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        format!("-s {ip}/{prefix} -j ACCEPT"),
    ]
}

/// `(chain, rule, insert_first)` of the isolation layout for one bridge.
fn isolation_rules(bridge: &str, policy: IngressPolicy) -> Vec<(&'static str, String, bool)> {
    let mut rules = vec![
        (FORWARD, format!("-m comment --comment {ISOLATION_COMMENT} -j {STAGE1}"), true),
        (
            STAGE1,
            format!("-i {bridge} ! -o {bridge} -m comment --comment {ISOLATION_COMMENT} -j {STAGE2}"),
            true,
        ),
        (STAGE1, format!("-m comment --comment {ISOLATION_COMMENT} -j RETURN"), false),
        (STAGE2, format!("-o {bridge} -m comment --comment {ISOLATION_COMMENT} -j DROP"), true),
        (STAGE2, format!("-m comment --comment {ISOLATION_COMMENT} -j RETURN"), false),
    ];
    if policy == IngressPolicy::Isolated {
        // Only bridged traffic that reaches iptables (br_netfilter) or routed hairpin
        // traffic passes here; the nftables backend also cuts the bridge ports at layer 2.
        rules.push((
            STAGE1,
            format!("-i {bridge} -o {bridge} -m comment --comment {ICC_COMMENT} -j DROP"),
            true,
        ));
    }
    rules
}

/// What an attachment needs in one address family.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    pub admin_chain: &'a str,
    pub ips: Vec<IpAddr>,
    pub policy: IngressPolicy,
    pub bridge: Option<&'a str>,
}

/// A `--noflush` restore script, built only from lines that change something.
#[derive(Debug, Default)]
struct Script {
    declarations: Vec<String>,
    lines: Vec<String>,
}

impl Script {
    fn declare(&mut self, state: &FilterState, chain: &str) {
        // Declaring an existing chain in a --noflush restore flushes it: only new ones.
        let line = format!(":{chain} - [0:0]");
        if !state.has_chain(chain) && !self.declarations.contains(&line) {
            self.declarations.push(line);
        }
    }

    fn ensure(&mut self, state: &FilterState, chain: &str, rule: &str, first: bool) {
        if !state.has_rule(chain, rule) {
            let line = if first { format!("-I {chain} 1 {rule}") } else { format!("-A {chain} {rule}") };
            if !self.lines.contains(&line) {
                self.lines.push(line);
            }
        }
    }

    fn finish(self) -> Option<String> {
        if self.declarations.is_empty() && self.lines.is_empty() {
            return None;
        }
        let mut out = String::from("*filter\n");
        for line in self.declarations.iter().chain(&self.lines) {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
        Some(out)
    }
}

/// The script that brings `state` to what ADD needs; `None` when it is all there.
pub fn add_script(state: &FilterState, wanted: &Wanted<'_>) -> Option<String> {
    let mut script = Script::default();
    if !wanted.ips.is_empty() {
        script.declare(state, PRIVATE_CHAIN);
        script.declare(state, wanted.admin_chain);
        script.ensure(state, FORWARD, &forward_jump(), true);
        script.ensure(state, PRIVATE_CHAIN, &admin_jump(wanted.admin_chain), true);
        for ip in &wanted.ips {
            for rule in address_rules(*ip) {
                script.ensure(state, PRIVATE_CHAIN, &rule, false);
            }
        }
    }
    if let (Some(bridge), IngressPolicy::SameBridge | IngressPolicy::Isolated) =
        (wanted.bridge, wanted.policy)
    {
        script.declare(state, STAGE1);
        script.declare(state, STAGE2);
        // The FORWARD jump to STAGE-1 is inserted after the CNI-FORWARD one, so it ends up
        // first: isolation drops are decided before the accepts.
        for (chain, rule, first) in isolation_rules(bridge, wanted.policy) {
            script.ensure(state, chain, &rule, first);
        }
    }
    script.finish()
}

/// The script that removes the attachment's address rules that are present.
pub fn del_script(state: &FilterState, ips: &[IpAddr]) -> Option<String> {
    let mut script = Script::default();
    for ip in ips {
        for rule in address_rules(*ip) {
            if state.has_rule(PRIVATE_CHAIN, &rule) {
                script.lines.push(format!("-D {PRIVATE_CHAIN} {rule}"));
            }
        }
    }
    script.finish()
}

/// What CHECK finds missing, if anything.
pub fn missing(state: &FilterState, wanted: &Wanted<'_>) -> Option<String> {
    if !wanted.ips.is_empty() {
        for chain in [PRIVATE_CHAIN, wanted.admin_chain] {
            if !state.has_chain(chain) {
                return Some(format!("chain {chain} does not exist"));
            }
        }
        let mut expected = vec![(FORWARD, forward_jump()), (PRIVATE_CHAIN, admin_jump(wanted.admin_chain))];
        for ip in &wanted.ips {
            expected.extend(address_rules(*ip).into_iter().map(|r| (PRIVATE_CHAIN, r)));
        }
        if let Some((chain, rule)) = expected.into_iter().find(|(chain, rule)| !state.has_rule(chain, rule)) {
            return Some(format!("expected rule \"-A {chain} {rule}\" not found"));
        }
    }
    if let (Some(bridge), IngressPolicy::SameBridge | IngressPolicy::Isolated) =
        (wanted.bridge, wanted.policy)
    {
        if let Some((chain, rule, _)) = isolation_rules(bridge, wanted.policy)
            .into_iter()
            .find(|(chain, rule, _)| !state.has_rule(chain, rule))
        {
            return Some(format!("expected rule \"-A {chain} {rule}\" not found"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = r#"# Generated by iptables-save v1.8.9 (nf_tables)
*nat
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -s 10.88.0.5/32 -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
-A CNI-FORWARD -d 10.88.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A CNI-FORWARD -s 10.88.0.5/32  -j ACCEPT
COMMIT
"#;

    fn wanted(ips: &[&str]) -> Wanted<'static> {
        Wanted {
            admin_chain: "CNI-ADMIN",
            ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
            policy: IngressPolicy::Open,
            bridge: None,
        }
    }

    #[test]
    fn parses_only_the_filter_table() {
        let state = FilterState::parse(SAVED);
        assert!(state.has_chain("CNI-FORWARD") && state.has_chain("FORWARD"));
        assert!(!state.has_chain("POSTROUTING"));
        assert!(state.has_rule("CNI-FORWARD", "-s 10.88.0.5/32 -j ACCEPT"));
        assert!(!state.has_rule("POSTROUTING", "-s 10.88.0.5/32 -j MASQUERADE"));
    }

    #[test]
    fn fresh_table_gets_chains_jumps_and_rules_in_one_script() {
        let script = add_script(&FilterState::default(), &wanted(&["10.88.0.6"])).unwrap();
        assert_eq!(
            script,
            "*filter\n:CNI-FORWARD - [0:0]\n:CNI-ADMIN - [0:0]\n\
             -I FORWARD 1 -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD\n\
             -I CNI-FORWARD 1 -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN\n\
             -A CNI-FORWARD -d 10.88.0.6/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
             -A CNI-FORWARD -s 10.88.0.6/32 -j ACCEPT\nCOMMIT\n"
        );
    }

    #[test]
    fn existing_pieces_are_neither_redeclared_nor_repeated() {
        let state = FilterState::parse(SAVED);
        assert_eq!(add_script(&state, &wanted(&["10.88.0.5"])), None);
        let script = add_script(&state, &wanted(&["10.88.0.6"])).unwrap();
        assert!(!script.contains(":CNI-FORWARD"), "{script}");
        assert!(!script.contains("-I FORWARD"), "{script}");
        assert_eq!(script.lines().count(), 4, "{script}");
    }

    #[test]
    fn del_removes_only_present_rules_and_nothing_is_nothing() {
        let state = FilterState::parse(SAVED);
        let ip: IpAddr = "10.88.0.5".parse().unwrap();
        let script = del_script(&state, &[ip]).unwrap();
        assert_eq!(script.lines().filter(|l| l.starts_with("-D CNI-FORWARD")).count(), 2);
        assert_eq!(del_script(&state, &["10.88.0.9".parse().unwrap()]), None);
        assert_eq!(del_script(&FilterState::default(), &[ip]), None);
    }

    #[test]
    fn ipv6_uses_128_bit_prefixes() {
        assert_eq!(address_rules("fd00::5".parse().unwrap())[1], "-s fd00::5/128 -j ACCEPT");
    }

    #[test]
    fn isolation_layout_and_check() {
        let mut w = wanted(&["10.88.0.5"]);
        w.policy = IngressPolicy::Isolated;
        w.bridge = Some("cni0");
        let state = FilterState::parse(SAVED);
        let script = add_script(&state, &w).unwrap();
        assert!(script.contains(":CNI-ISOLATION-STAGE-1 - [0:0]"), "{script}");
        assert!(script.contains("-I CNI-ISOLATION-STAGE-1 1 -i cni0 ! -o cni0 "), "{script}");
        assert!(script.contains("-I CNI-ISOLATION-STAGE-1 1 -i cni0 -o cni0 "), "{script}");
        assert!(missing(&state, &w).unwrap().contains("CNI-ISOLATION-STAGE-1"));
        assert_eq!(missing(&state, &wanted(&["10.88.0.5"])), None);
        assert!(missing(&state, &wanted(&["10.88.0.7"])).unwrap().contains("10.88.0.7"));
        assert!(missing(&FilterState::default(), &wanted(&["10.88.0.5"])).unwrap().contains("CNI-FORWARD"));
    }
}
