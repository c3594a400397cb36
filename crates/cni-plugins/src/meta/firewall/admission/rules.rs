//! The admission rules, encoded as iptables-nft encodes the same `iptables` commands, so
//! `iptables-save`, `iptables -L` and Docker's own iptables calls keep reading the table:
//!
//! ```text
//! -I FORWARD -j CNI-RS-FORWARD
//! -A CNI-RS-FORWARD -s <ip> -m comment --comment "<tag>" -j ACCEPT
//! -A CNI-RS-FORWARD -d <ip> -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "<tag>" -j ACCEPT
//! -A CNI-RS-FORWARD -d <ip> -m conntrack --ctstate DNAT -m comment --comment "<tag>" -j ACCEPT
//! ```
//!
//! iptables-nft writes an address match as a payload load and a compare, `-m` matches as
//! x_tables `match` expressions in command-line order, then a counter, then the verdict,
//! and no nftables userdata: the attachment's tag lives in the comment match.

use std::net::IpAddr;

use cni_net::nft::xt::{comment_match, comment_of, conntrack_state_match, xt_ct_state};
use cni_net::nft::{CmpOp, Expr, Family, ListedRule, PayloadBase, Register, Rule, Verdict};
use cni_sdk::Attachment;

use crate::common::nft_attach;

/// The table and base chain iptables-nft keeps for the filter table's FORWARD hook.
pub const TABLE: &str = "filter";
pub const FORWARD: &str = "FORWARD";
/// Our chain in that table, jumped to from the top of FORWARD.
pub const CHAIN: &str = "CNI-RS-FORWARD";

/// The attachment's tag: the network's tag (what GC selects by), the attachment's key
/// (what DEL and CHECK select by) and, for people reading `iptables -L`, who it is.
pub fn tag(network: &str, who: &Attachment) -> String {
    format!(
        "{} {} id={} if={}",
        nft_attach::network_tag(network),
        attachment_key(network, who),
        who.container_id,
        who.ifname
    )
}

/// `att=<hash of network, container and interface>`: unique per attachment, short.
pub fn attachment_key(network: &str, who: &Attachment) -> String {
    format!("att={}", nft_attach::chain_name(network, who))
}

/// The tag's network part and attachment key, if `comment` is one of our tags.
pub fn parse_tag(comment: &str) -> Option<(&str, &str)> {
    let mut words = comment.split(' ');
    let (cni_rs, net, att) = (words.next()?, words.next()?, words.next()?);
    (cni_rs == "cni-rs" && net.starts_with("net=") && att.starts_with("att=")).then_some((net, att))
}

/// The tag a listed rule carries in its comment match, if any.
pub fn rule_tag(rule: &ListedRule) -> Option<String> {
    rule.rule.exprs.iter().find_map(comment_of)
}

pub fn family_of(ip: &IpAddr) -> Family {
    match ip {
        IpAddr::V4(_) => Family::Ipv4,
        IpAddr::V6(_) => Family::Ipv6,
    }
}

/// `-s <ip>` / `-d <ip>` (a full-length prefix: no mask, as iptables-nft writes it).
fn address(ip: &IpAddr, source: bool) -> [Expr; 2] {
    let (offset, data) = match (ip, source) {
        (IpAddr::V4(a), true) => (12, a.octets().to_vec()),
        (IpAddr::V4(a), false) => (16, a.octets().to_vec()),
        (IpAddr::V6(a), true) => (8, a.octets().to_vec()),
        (IpAddr::V6(a), false) => (24, a.octets().to_vec()),
    };
    let len = data.len() as u32;
    [
        Expr::Payload { dreg: Register::R1, base: PayloadBase::Network, offset, len },
        Expr::Cmp { sreg: Register::R1, op: CmpOp::Eq, data },
    ]
}

fn accept_rule(ip: &IpAddr, mut exprs: Vec<Expr>) -> Rule {
    exprs.push(Expr::Counter { packets: 0, bytes: 0 });
    exprs.push(Expr::Verdict(Verdict::Accept));
    Rule { exprs, ..Rule::new(family_of(ip), TABLE, CHAIN) }
}

/// The attachment's three rules for one of its addresses: its egress, the replies to it,
/// and connections DNATed to it (published ports).
pub fn admission_rules(ip: &IpAddr, tag: &str) -> Vec<Rule> {
    let states = |mask| {
        let [load, cmp] = address(ip, false);
        vec![load, cmp, conntrack_state_match(mask), comment_match(tag)]
    };
    let [load, cmp] = address(ip, true);
    vec![
        accept_rule(ip, vec![load, cmp, comment_match(tag)]),
        accept_rule(ip, states(xt_ct_state::RELATED | xt_ct_state::ESTABLISHED)),
        accept_rule(ip, states(xt_ct_state::DNAT)),
    ]
}

/// `-j CNI-RS-FORWARD` in FORWARD.
pub fn jump_rule(family: Family) -> Rule {
    Rule {
        exprs: vec![Expr::Counter { packets: 0, bytes: 0 }, Expr::Verdict(Verdict::Jump(CHAIN.into()))],
        ..Rule::new(family, TABLE, FORWARD)
    }
}

pub fn is_jump_to_ours(rule: &ListedRule) -> bool {
    rule.rule.exprs.iter().any(|e| matches!(e, Expr::Verdict(Verdict::Jump(c)) if c == CHAIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_parse_back_and_name_the_attachment() {
        let who = Attachment::new("c1", "eth0");
        let tag = tag("podman", &who);
        let (net, att) = parse_tag(&tag).unwrap();
        assert_eq!(format!("cni-rs {net}"), nft_attach::network_tag("podman"));
        assert_eq!(att, attachment_key("podman", &who));
        assert!(tag.ends_with(" id=c1 if=eth0"), "{tag}");
        assert_eq!(parse_tag("cni-rs net=x"), None);
        assert_eq!(parse_tag("an administrator's comment"), None);
    }

    #[test]
    fn three_rules_per_address_in_the_address_family() {
        let rules = admission_rules(&"fd00::5".parse().unwrap(), "t");
        assert_eq!(rules.len(), 3);
        assert!(rules.iter().all(|r| r.family == Family::Ipv6 && r.chain == CHAIN && r.comment.is_none()));
        assert!(matches!(rules[0].exprs[0], Expr::Payload { offset: 8, len: 16, .. }));
        assert!(matches!(rules[1].exprs[0], Expr::Payload { offset: 24, len: 16, .. }));
    }
}
