//! The iptables state the Go reference plugins (1.1.1, Debian's) keep for one attachment,
//! rendered as `iptables-save` prints it, and the `iptables-restore --noflush` script that
//! adds what a table lacks of it. Pure functions: every line is unit-tested against what
//! the Go plugins made on a real host.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::common::reference_state::{chain_name, saved::SavedTable};
use crate::meta::firewall::iptables::rules as firewall_rules;

pub const NAT: &str = "nat";
pub const FILTER: &str = "filter";
const HOSTPORT_DNAT: &str = "CNI-HOSTPORT-DNAT";
const HOSTPORT_SETMARK: &str = "CNI-HOSTPORT-SETMARK";
const HOSTPORT_MASQ: &str = "CNI-HOSTPORT-MASQ";
/// The reference cuts comments to iptables' 256 characters.
const MAX_COMMENT: usize = 256;
/// multiport takes at most 15 ports per rule.
const MULTIPORT_MAX: usize = 15;

/// One rule of the reference's layout: its table and chain, its text in `iptables-save`'s
/// form (after `-A <chain> `), and whether the reference inserts it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub table: &'static str,
    pub chain: String,
    pub rule: String,
    pub first: bool,
}

/// What one address family needs: chains (table, name) and rules, in the order the
/// reference makes them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Layout {
    pub chains: Vec<(&'static str, String)>,
    pub lines: Vec<Line>,
}

impl Layout {
    fn chain(&mut self, table: &'static str, name: &str) {
        if !self.chains.iter().any(|(t, c)| *t == table && c == name) {
            self.chains.push((table, name.to_string()));
        }
    }

    fn rule(&mut self, table: &'static str, chain: &str, rule: String, first: bool) {
        let line = Line { table, chain: chain.to_string(), rule, first };
        if !self.lines.contains(&line) {
            self.lines.push(line);
        }
    }

    pub fn extend(&mut self, other: Layout) {
        for (table, chain) in other.chains {
            self.chain(table, &chain);
        }
        for line in other.lines {
            self.rule(line.table, &line.chain, line.rule, line.first);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.lines.is_empty()
    }
}

/// A comment as iptables-save quotes it, cut as the reference cuts it.
fn quoted(text: &str) -> String {
    let mut text = text.to_string();
    if text.len() > MAX_COMMENT {
        let mut end = MAX_COMMENT - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn owner_comment(network: &str, container_id: &str) -> String {
    format!("name: \"{network}\" id: \"{container_id}\"")
}

fn host_prefix(ip: IpAddr) -> String {
    format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 })
}

/// bridge's and ptp's `ipMasq`: the attachment's chain `CNI-<hash>` (shared by both
/// families), its accept of the address's own subnet and masquerade of the rest but
/// multicast, and the `POSTROUTING` jump from the address.
pub fn masquerade(network: &str, container_id: &str, address: IpNet) -> Layout {
    let chain = chain_name(network, container_id, "");
    let comment = quoted(&owner_comment(network, container_id));
    let multicast = if address.addr().is_ipv4() { "224.0.0.0/4" } else { "ff00::/8" };
    let mut out = Layout::default();
    out.chain(NAT, &chain);
    out.rule(NAT, &chain, format!("-d {} -m comment --comment {comment} -j ACCEPT", address.trunc()), false);
    out.rule(NAT, &chain, format!("! -d {multicast} -m comment --comment {comment} -j MASQUERADE"), false);
    out.rule(
        NAT,
        "POSTROUTING",
        format!("-s {} -m comment --comment {comment} -j {chain}", host_prefix(address.addr())),
        false,
    );
    out
}

/// One port mapping as the runtime gave it (`portMappings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub host_port: u16,
    pub container_port: u16,
    /// Lower case, as iptables prints it.
    pub protocol: String,
    pub host_ip: Option<IpAddr>,
}

/// portmap's options that shape its iptables rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortmapOptions {
    pub snat: bool,
    pub mark_bit: u32,
    /// `externalSetMarkChain`: the administrator's chain instead of `CNI-HOSTPORT-SETMARK`.
    pub set_mark_chain: Option<String>,
}

/// portmap (iptables, as in 1.1.1): the shared `CNI-HOSTPORT-*` chains and their jumps,
/// the attachment's `CNI-DN-<hash>` chain with a mark rule for hairpin and localhost
/// traffic and a DNAT per mapping, and its entries in `CNI-HOSTPORT-DNAT` (one per
/// protocol and 15 ports). `container` is the container's address of this family, with
/// its prefix (the hairpin rule matches its subnet).
pub fn portmap(
    network: &str,
    container_id: &str,
    container: IpNet,
    mappings: &[Mapping],
    options: &PortmapOptions,
) -> Layout {
    let v6 = container.addr().is_ipv6();
    // A hostIP of the other family leaves the mapping out of this one.
    let mappings: Vec<&Mapping> =
        mappings.iter().filter(|m| m.host_ip.is_none_or(|ip| ip.is_ipv6() == v6)).collect();
    let mut out = Layout::default();
    if mappings.is_empty() {
        return out;
    }
    let chain = chain_name(network, container_id, "DN-");
    let mark = format!("{:#x}", 1u64 << options.mark_bit);
    let set_mark = options.set_mark_chain.clone().unwrap_or_else(|| HOSTPORT_SETMARK.to_string());
    if options.snat && options.set_mark_chain.is_none() {
        out.chain(NAT, HOSTPORT_SETMARK);
        out.rule(
            NAT,
            HOSTPORT_SETMARK,
            format!("-m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark {mark}/{mark}"),
            false,
        );
    }
    if options.snat {
        out.chain(NAT, HOSTPORT_MASQ);
        out.rule(NAT, HOSTPORT_MASQ, format!("-m mark --mark {mark}/{mark} -j MASQUERADE"), false);
        out.rule(
            NAT,
            "POSTROUTING",
            format!("-m comment --comment \"CNI portfwd requiring masquerade\" -j {HOSTPORT_MASQ}"),
            true,
        );
    }
    out.chain(NAT, HOSTPORT_DNAT);
    for entry in ["PREROUTING", "OUTPUT"] {
        out.rule(NAT, entry, format!("-m addrtype --dst-type LOCAL -j {HOSTPORT_DNAT}"), true);
    }
    out.chain(NAT, &chain);
    let comment = quoted(&format!("dnat {}", owner_comment(network, container_id)));
    let mut by_protocol: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for m in &mappings {
        by_protocol.entry(&m.protocol).or_default().push(m.host_port.to_string());
    }
    for (protocol, ports) in &by_protocol {
        for group in ports.chunks(MULTIPORT_MAX) {
            let ports = group.join(",");
            out.rule(
                NAT,
                HOSTPORT_DNAT,
                format!(
                    "-p {protocol} -m comment --comment {comment} -m multiport --dports {ports} -j {chain}"
                ),
                false,
            );
        }
    }
    for m in &mappings {
        let dst = match m.host_ip {
            Some(ip) if !ip.is_unspecified() => format!("-d {} ", host_prefix(ip)),
            _ => String::new(),
        };
        let proto = &m.protocol;
        let port = format!("-p {proto} -m {proto} --dport {}", m.host_port);
        if options.snat {
            out.rule(NAT, &chain, format!("-s {} {dst}{port} -j {set_mark}", container.trunc()), false);
            if !v6 {
                out.rule(NAT, &chain, format!("-s 127.0.0.1/32 {dst}{port} -j {set_mark}"), false);
            }
        }
        let to = match container.addr() {
            IpAddr::V4(a) => format!("{a}:{}", m.container_port),
            IpAddr::V6(a) => format!("[{a}]:{}", m.container_port),
        };
        out.rule(NAT, &chain, format!("{dst}{port} -j DNAT --to-destination {to}"), false);
    }
    out
}

/// The firewall (iptables backend, `ingressPolicy` open): `CNI-FORWARD` reached from
/// `FORWARD`, the admin chain reached first from it, and the address's two rules.
pub fn firewall(admin_chain: &str, ip: IpAddr) -> Layout {
    let mut out = Layout::default();
    out.chain(FILTER, firewall_rules::PRIVATE_CHAIN);
    out.chain(FILTER, admin_chain);
    out.rule(FILTER, "FORWARD", firewall_rules::forward_jump(), true);
    out.rule(FILTER, firewall_rules::PRIVATE_CHAIN, firewall_rules::admin_jump(admin_chain), true);
    for rule in firewall_rules::address_rules(ip) {
        out.rule(FILTER, firewall_rules::PRIVATE_CHAIN, rule, false);
    }
    out
}

fn normalise(rule: &str) -> String {
    rule.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `iptables-restore --noflush` script that adds what `saved` (one `SavedTable` per
/// table) lacks of `layout`; `None` when it is all there. Existing chains are never
/// declared (a declaration flushes an existing chain in a `--noflush` restore).
pub fn restore_script(layout: &Layout, saved: &BTreeMap<&'static str, SavedTable>) -> Option<String> {
    let mut out = String::new();
    for table in [NAT, FILTER] {
        let empty = SavedTable::default();
        let state = saved.get(table).unwrap_or(&empty);
        let has_rule = |chain: &str, rule: &str| {
            let wanted = normalise(rule);
            state.rules.iter().any(|(c, r)| c == chain && normalise(r) == wanted)
        };
        let mut lines: Vec<String> = layout
            .chains
            .iter()
            .filter(|(t, c)| *t == table && !state.chains.contains(c))
            .map(|(_, c)| format!(":{c} - [0:0]"))
            .collect();
        for line in layout.lines.iter().filter(|l| l.table == table && !has_rule(&l.chain, &l.rule)) {
            lines.push(if line.first {
                format!("-I {} 1 {}", line.chain, line.rule)
            } else {
                format!("-A {} {}", line.chain, line.rule)
            });
        }
        if !lines.is_empty() {
            out.push_str(&format!("*{table}\n{}\nCOMMIT\n", lines.join("\n")));
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "cnitool-49922c8181254a6af19d";

    /// What Debian's Go plugins 1.1.1 (bridge ipMasq, portmap, firewall) made for one
    /// container of network "debk" with 10.123.0.2/24 and fd12:3::2/64, tcp 8080->80 and
    /// udp 8053->53 (iptables-save, the container's lines and the shared ones).
    const GO_V4: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:CNI-ADMIN - [0:0]
:CNI-FORWARD - [0:0]
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
-A CNI-FORWARD -d 10.123.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A CNI-FORWARD -s 10.123.0.2/32 -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-4e983dabbf0948fa47682366 - [0:0]
:CNI-DN-4e983dabbf0948fa47682 - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
:CNI-HOSTPORT-SETMARK - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -s 10.123.0.2/32 -m comment --comment "name: \"debk\" id: \"cnitool-49922c8181254a6af19d\"" -j CNI-4e983dabbf0948fa47682366
-A CNI-4e983dabbf0948fa47682366 -d 10.123.0.0/24 -m comment --comment "name: \"debk\" id: \"cnitool-49922c8181254a6af19d\"" -j ACCEPT
-A CNI-4e983dabbf0948fa47682366 ! -d 224.0.0.0/4 -m comment --comment "name: \"debk\" id: \"cnitool-49922c8181254a6af19d\"" -j MASQUERADE
-A CNI-DN-4e983dabbf0948fa47682 -s 10.123.0.0/24 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-4e983dabbf0948fa47682 -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-4e983dabbf0948fa47682 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.123.0.2:80
-A CNI-DN-4e983dabbf0948fa47682 -s 10.123.0.0/24 -p udp -m udp --dport 8053 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-4e983dabbf0948fa47682 -s 127.0.0.1/32 -p udp -m udp --dport 8053 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-4e983dabbf0948fa47682 -p udp -m udp --dport 8053 -j DNAT --to-destination 10.123.0.2:53
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"debk\" id: \"cnitool-49922c8181254a6af19d\"" -m multiport --dports 8080 -j CNI-DN-4e983dabbf0948fa47682
-A CNI-HOSTPORT-DNAT -p udp -m comment --comment "dnat name: \"debk\" id: \"cnitool-49922c8181254a6af19d\"" -m multiport --dports 8053 -j CNI-DN-4e983dabbf0948fa47682
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000
COMMIT
"#;

    fn mappings() -> Vec<Mapping> {
        vec![
            Mapping { host_port: 8080, container_port: 80, protocol: "tcp".into(), host_ip: None },
            Mapping { host_port: 8053, container_port: 53, protocol: "udp".into(), host_ip: None },
        ]
    }

    fn debk_v4() -> Layout {
        let address: IpNet = "10.123.0.2/24".parse().unwrap();
        let options = PortmapOptions { snat: true, mark_bit: 13, set_mark_chain: None };
        let mut layout = masquerade("debk", ID, address);
        layout.extend(portmap("debk", ID, address, &mappings(), &options));
        layout.extend(firewall("CNI-ADMIN", address.addr()));
        layout
    }

    fn saved(text: &str) -> BTreeMap<&'static str, SavedTable> {
        [(NAT, SavedTable::parse(text, NAT)), (FILTER, SavedTable::parse(text, FILTER))].into_iter().collect()
    }

    #[test]
    fn every_line_is_one_the_go_plugins_made() {
        let go = saved(GO_V4);
        let layout = debk_v4();
        assert_eq!(restore_script(&layout, &go), None, "all of it is in the Go plugins' state");
        // And all of the Go plugins' state for the container is in the layout.
        let ours = restore_script(&layout, &BTreeMap::new()).unwrap();
        let rules = GO_V4.lines().filter(|l| l.starts_with("-A ")).count();
        let chains = GO_V4.lines().filter(|l| l.starts_with(":CNI-")).count();
        let script_rules = ours.lines().filter(|l| l.starts_with("-A ") || l.starts_with("-I ")).count();
        assert_eq!(script_rules, rules, "{ours}");
        assert_eq!(ours.lines().filter(|l| l.starts_with(":CNI-")).count(), chains, "{ours}");
    }

    #[test]
    fn only_what_is_missing_is_added_and_shared_chains_are_not_redeclared() {
        let shared_only = "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\n\
            -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\nCOMMIT\n";
        let script = restore_script(&debk_v4(), &saved(shared_only)).unwrap();
        assert!(!script.contains(":CNI-HOSTPORT-DNAT"), "{script}");
        assert!(!script.contains("-I PREROUTING"), "{script}");
        assert!(script.contains("-I OUTPUT 1 -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT"), "{script}");
        assert!(
            script.contains("*filter\n:CNI-FORWARD - [0:0]\n:CNI-ADMIN - [0:0]\n-I FORWARD 1 "),
            "{script}"
        );
    }

    #[test]
    fn v6_has_no_localhost_mark_and_brackets_the_destination() {
        let address: IpNet = "fd12:3::2/64".parse().unwrap();
        let options = PortmapOptions { snat: true, mark_bit: 13, set_mark_chain: None };
        let layout = portmap("debk", ID, address, &mappings(), &options);
        let rules: Vec<&str> = layout.lines.iter().map(|l| l.rule.as_str()).collect();
        assert!(
            rules.contains(&"-p tcp -m tcp --dport 8080 -j DNAT --to-destination [fd12:3::2]:80"),
            "{rules:?}"
        );
        assert!(!rules.iter().any(|r| r.contains("127.0.0.1")), "{rules:?}");
        assert!(
            rules.contains(&"-s fd12:3::/64 -p udp -m udp --dport 8053 -j CNI-HOSTPORT-SETMARK"),
            "{rules:?}"
        );
    }

    #[test]
    fn host_ips_select_the_family_and_add_a_destination() {
        let address: IpNet = "10.1.0.2/16".parse().unwrap();
        let options = PortmapOptions { snat: false, mark_bit: 13, set_mark_chain: None };
        let mut m = mappings();
        m[0].host_ip = Some("192.0.2.1".parse().unwrap());
        m[1].host_ip = Some("2001:db8::1".parse().unwrap());
        let layout = portmap("n", "c", address, &m, &options);
        let rules: Vec<&str> = layout.lines.iter().map(|l| l.rule.as_str()).collect();
        assert!(rules
            .contains(&"-d 192.0.2.1/32 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.1.0.2:80"));
        assert!(!rules.iter().any(|r| r.contains("8053")), "{rules:?}");
        assert!(!layout.chains.iter().any(|(_, c)| c == HOSTPORT_MASQ), "snat off: no masquerade chain");
    }

    #[test]
    fn long_comments_are_cut_as_the_reference_cuts_them() {
        let q = quoted(&"x".repeat(300));
        assert_eq!(q.len(), 256 + 2);
        assert!(q.ends_with("...\""));
    }
}
