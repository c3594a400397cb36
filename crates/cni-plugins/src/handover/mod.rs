//! Handing live attachments over to the Go reference plugins before an operator swaps
//! their binaries back (`cnitool handover`). For each attachment the reference's DEL
//! must find what its own ADD would have made, or it fails (bridge's `ipMasq` teardown
//! cannot delete a jump to a chain that does not exist, and the runtime retries the
//! container's stop for ever); and what ours made must be gone, since the reference's DEL
//! does not know it.
//!
//! So, per attachment and plugin of its cached configuration:
//!
//! | plugin | the reference's state written | ours removed |
//! |---|---|---|
//! | bridge, ptp with `ipMasq` | `nat` chain `CNI-<hash>` and its `POSTROUTING` jump per address | the attachment's chain in `inet cni_plugins_masquerade` |
//! | portmap | `CNI-HOSTPORT-*` chains, `CNI-DN-<hash>` and its entries | the attachment's chain and map elements in `inet cni_portmap` |
//! | firewall | `CNI-FORWARD`/`CNI-ADMIN` and the address rules | the attachment's chain and elements in `inet cni_firewall` |
//!
//! Everything else (host-local's reservations, tuning's record, libcni's cache, links and
//! addresses) is already in the reference's layout. The reference's rules are added first
//! (one `iptables-save` of `nat` and `filter` and one `iptables-restore --noflush` per
//! address family, for all attachments at once), then ours are removed, so masquerading
//! and host ports keep working throughout. Running it again adds and removes nothing.

mod layout;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use cni_net::nft::NftClient;
use cni_sdk::{Attachment, CniError, CniResult};
use ipnet::IpNet;
use serde_json::{Map, Value};

use crate::common::iptables::{self, Proto};
use crate::common::masq::Masquerade;
use crate::common::nft_attach;
use crate::common::reference_state::saved::SavedTable;
use crate::meta::firewall::config::validate_chain_name;
use crate::meta::firewall::nftables::FirewallTable;
use crate::meta::portmap::{self, rules as portmap_rules};
use cni_types::validate::{validate_container_id, validate_interface_name, validate_network_name};
use layout::{Layout, Mapping, PortmapOptions};

/// One attachment as libcni's cache records it.
#[derive(Debug, Clone)]
pub struct LiveAttachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    /// The network's plugin configurations in chain order (a list's `plugins`, or the
    /// single configuration).
    pub plugins: Vec<Value>,
    /// The capability arguments the runtime gave (`portMappings`).
    pub capability_args: Map<String, Value>,
    /// The cached ADD result.
    pub result: CniResult,
}

/// State of ours that an attachment holds in one of our tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OurTable {
    Masquerade,
    Portmap,
    Firewall,
}

impl OurTable {
    fn name(self) -> &'static str {
        match self {
            OurTable::Masquerade => "inet cni_plugins_masquerade",
            OurTable::Portmap => "inet cni_portmap",
            OurTable::Firewall => "inet cni_firewall",
        }
    }
}

/// What a hand-over does: the reference's rules per family, and ours to remove.
#[derive(Debug, Default)]
pub struct Plan {
    /// `iptables-restore --noflush` scripts (IPv4, IPv6) adding only what is missing.
    scripts: Vec<(Proto, String)>,
    ours: Vec<(String, Attachment, Vec<OurTable>)>,
}

/// A key of a plugin configuration, matched as the reference's decoder matches it (the
/// exact key, else one that folds to it: see `cni_types::fold`).
fn key<'a>(conf: &'a Value, name: &str) -> Option<&'a Value> {
    cni_types::fold::get(conf.as_object()?, name)
}

fn plugin_type(conf: &Value) -> &str {
    key(conf, "type").and_then(Value::as_str).unwrap_or("")
}

fn refuse(live: &LiveAttachment, what: String) -> CniError {
    CniError::invalid_config(format!(
        "cannot hand {:?} (network {:?}, interface {:?}) over to the reference plugins: {what}",
        live.container_id, live.network, live.ifname
    ))
}

/// The container interface's addresses (with their prefixes), first of each family in
/// `first_only`, as the reference's portmap picks them.
fn container_addresses(live: &LiveAttachment, first_only: bool) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = Vec::new();
    for address in portmap::host::container_addresses(&live.result, &live.ifname) {
        if !first_only || !out.iter().any(|o| o.addr().is_ipv4() == address.addr().is_ipv4()) {
            out.push(address);
        }
    }
    out
}

fn mappings(live: &LiveAttachment, conf: &Value) -> Result<Vec<Mapping>, CniError> {
    // libcni gives runtimeConfig.portMappings from the capability; a configuration may
    // also carry it itself.
    let from_conf = key(conf, "runtimeConfig").and_then(|rc| key(rc, "portMappings"));
    let Some(list) = live.capability_args.get("portMappings").or(from_conf) else {
        return Ok(Vec::new());
    };
    let bad = |what: &str| refuse(live, format!("portMappings: {what}"));
    let entries = list.as_array().ok_or_else(|| bad("not a list"))?;
    let mut out = Vec::new();
    for entry in entries {
        let port = |name: &str| {
            key(entry, name).and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0)
        };
        let host_port = port("hostPort").ok_or_else(|| bad("hostPort missing or not a port"))?;
        let container_port =
            port("containerPort").ok_or_else(|| bad("containerPort missing or not a port"))?;
        let protocol = key(entry, "protocol").and_then(Value::as_str).unwrap_or("tcp").to_ascii_lowercase();
        if !["tcp", "udp", "sctp"].contains(&protocol.as_str()) {
            return Err(bad(&format!("unknown protocol {protocol:?}")));
        }
        let host_ip = match key(entry, "hostIP").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(text) => Some(text.parse::<IpAddr>().map_err(|_| bad(&format!("hostIP {text:?}")))?),
            None => None,
        };
        out.push(Mapping { host_port, container_port, protocol, host_ip });
    }
    Ok(out)
}

fn portmap_options(live: &LiveAttachment, conf: &Value) -> Result<PortmapOptions, CniError> {
    // Ours refuses externalSetMarkChain, so no attachment of ours has one.
    for unsupported in ["conditionsV4", "conditionsV6", "masqAll", "externalSetMarkChain"] {
        if key(conf, unsupported).is_some_and(|v| !v.is_null() && *v != Value::Bool(false)) {
            return Err(refuse(live, format!("portmap's {unsupported} is not handed over")));
        }
    }
    let mark_bit = match key(conf, "markMasqBit") {
        None | Some(Value::Null) => 13,
        Some(v) => {
            v.as_u64().filter(|b| *b <= 31).ok_or_else(|| refuse(live, "portmap's markMasqBit".into()))?
                as u32
        }
    };
    Ok(PortmapOptions {
        snat: key(conf, "snat").and_then(Value::as_bool).unwrap_or(true),
        mark_bit,
        set_mark_chain: None,
    })
}

/// The reference's layout for one attachment in each family, and our tables it uses.
fn attachment_layout(live: &LiveAttachment) -> Result<([Layout; 2], Vec<OurTable>), CniError> {
    // The names end up in an iptables-restore script (comments, chain names): a cache
    // entry that is not what libcni writes must not be able to add a line of its own.
    validate_network_name(&live.network).map_err(|e| refuse(live, e.msg))?;
    validate_container_id(&live.container_id).map_err(|e| refuse(live, e.msg))?;
    validate_interface_name(&live.ifname).map_err(|e| refuse(live, e.msg))?;
    let mut layouts = [Layout::default(), Layout::default()];
    let slot = |ip: IpAddr| usize::from(ip.is_ipv6());
    let mut ours = Vec::new();
    for conf in &live.plugins {
        match plugin_type(conf) {
            "bridge" | "ptp" => {
                if key(conf, "macspoofchk").and_then(Value::as_bool) == Some(true) {
                    return Err(refuse(live, "bridge's macspoofchk is not handed over".into()));
                }
                if key(conf, "ipMasq").and_then(Value::as_bool) == Some(true) {
                    for address in container_addresses(live, false) {
                        let l = layout::masquerade(&live.network, &live.container_id, address);
                        layouts[slot(address.addr())].extend(l);
                    }
                    ours.push(OurTable::Masquerade);
                }
            }
            "portmap" => {
                let options = portmap_options(live, conf)?;
                let mappings = mappings(live, conf)?;
                for address in container_addresses(live, true) {
                    let l = layout::portmap(&live.network, &live.container_id, address, &mappings, &options);
                    layouts[slot(address.addr())].extend(l);
                }
                ours.push(OurTable::Portmap);
            }
            "firewall" => {
                let backend = key(conf, "backend").and_then(Value::as_str).unwrap_or("");
                if !["", "iptables", "nftables"].contains(&backend) {
                    return Err(refuse(live, format!("firewall backend {backend:?}")));
                }
                let policy = key(conf, "ingressPolicy").and_then(Value::as_str).unwrap_or("");
                if !["", "open"].contains(&policy) {
                    return Err(refuse(
                        live,
                        format!("firewall ingressPolicy {policy:?} is not handed over"),
                    ));
                }
                let admin = match key(conf, "iptablesAdminChainName").and_then(Value::as_str) {
                    None | Some("") => "CNI-ADMIN",
                    Some(name) => {
                        validate_chain_name(name).map_err(|e| refuse(live, e.msg))?;
                        name
                    }
                };
                // The reference opens every address of the result.
                for ip in &live.result.ips {
                    layouts[slot(ip.address.addr())].extend(layout::firewall(admin, ip.address.addr()));
                }
                if backend != "iptables" {
                    ours.push(OurTable::Firewall);
                }
            }
            _ => {}
        }
    }
    Ok((layouts, ours))
}

/// Works out the hand-over of `live`: reads the `nat` and `filter` tables of each family
/// that needs something (one `iptables-save` each) and computes what is missing.
pub fn plan(live: &[LiveAttachment]) -> Result<Plan, CniError> {
    let mut wanted = [Layout::default(), Layout::default()];
    let mut plan = Plan::default();
    for attachment in live {
        let ([v4, v6], ours) = attachment_layout(attachment)?;
        wanted[0].extend(v4);
        wanted[1].extend(v6);
        if !ours.is_empty() {
            let who = Attachment::new(&attachment.container_id, &attachment.ifname);
            plan.ours.push((attachment.network.clone(), who, ours));
        }
    }
    for (proto, layout) in [Proto::V4, Proto::V6].into_iter().zip(wanted) {
        if layout.is_empty() {
            continue;
        }
        let mut saved = BTreeMap::new();
        for table in [layout::NAT, layout::FILTER] {
            saved.insert(table, SavedTable::parse(&iptables::save(proto, table)?, table));
        }
        if let Some(script) = layout::restore_script(&layout, &saved) {
            plan.scripts.push((proto, script));
        }
    }
    Ok(plan)
}

impl Plan {
    /// What [`Plan::apply`] would do, for `--dry-run`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (proto, script) in &self.scripts {
            let _ = writeln!(out, "# {} --noflush", proto.tool("restore"));
            out.push_str(script);
        }
        for (network, who, tables) in &self.ours {
            for table in tables {
                let _ = writeln!(
                    out,
                    "# remove from {}: network {network:?} container {} interface {}",
                    table.name(),
                    who.container_id,
                    who.ifname
                );
            }
        }
        if out.is_empty() {
            out.push_str("# nothing to hand over\n");
        }
        out
    }

    /// Adds the reference's rules (under our iptables lock), then removes ours.
    pub fn apply(&self) -> Result<(), CniError> {
        if !self.scripts.is_empty() {
            let _lock = iptables::lock()?;
            for (proto, script) in &self.scripts {
                iptables::restore(*proto, script)?;
            }
        }
        if self.ours.is_empty() {
            return Ok(());
        }
        let mut nft = NftClient::new().map_err(|e| CniError::internal(format!("nftables: {e}")))?;
        for (network, who, tables) in &self.ours {
            for table in tables {
                match table {
                    OurTable::Masquerade => nft_attach::detach::<Masquerade>(&mut nft, network, who, None)?,
                    OurTable::Portmap => portmap_rules::detach(&mut nft, network, who)?,
                    OurTable::Firewall => nft_attach::detach::<FirewallTable>(&mut nft, network, who, None)?,
                }
            }
        }
        Ok(())
    }
}

/// Plans and, unless `dry_run`, applies the hand-over; returns the plan's description.
pub fn hand_over(live: &[LiveAttachment], dry_run: bool) -> Result<String, CniError> {
    let plan = plan(live)?;
    if !dry_run {
        plan.apply()?;
    }
    Ok(plan.describe())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::Version;
    use serde_json::json;

    fn live(network: &str, id: &str, plugins: Value, cap: Value) -> LiveAttachment {
        let result = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "br0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"interface": 2, "address": "10.9.0.2/24"}, {"interface": 2, "address": "fd09::2/64"}]});
        LiveAttachment {
            network: network.into(),
            container_id: id.into(),
            ifname: "eth0".into(),
            plugins: plugins.as_array().unwrap().clone(),
            capability_args: cap.as_object().unwrap().clone(),
            result: CniResult::parse(result, Version::LATEST).unwrap().0,
        }
    }

    fn k8s() -> Value {
        json!([{"type": "bridge", "ipMasq": true}, {"type": "portmap", "capabilities": {"portMappings": true}},
               {"type": "firewall"}, {"type": "tuning"}])
    }

    fn ports() -> Value {
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80}]})
    }

    #[test]
    fn a_kubernetes_chain_gets_each_plugins_rules_in_both_families() {
        let ([v4, v6], ours) = attachment_layout(&live("n", "c1", k8s(), ports())).unwrap();
        assert_eq!(ours, [OurTable::Masquerade, OurTable::Portmap, OurTable::Firewall]);
        for (layout, dnat) in [(v4, "10.9.0.2:80"), (v6, "[fd09::2]:80")] {
            let rules: Vec<&str> = layout.lines.iter().map(|l| l.rule.as_str()).collect();
            assert!(rules.iter().any(|r| r.ends_with(&format!("--to-destination {dnat}"))), "{rules:?}");
            assert!(rules.iter().any(|r| r.ends_with("-j MASQUERADE") && r.starts_with("! -d")), "{rules:?}");
            assert!(rules.iter().any(|r| r.contains("--ctstate RELATED,ESTABLISHED")), "{rules:?}");
        }
    }

    #[test]
    fn keys_match_without_regard_to_case_and_without_ipmasq_nothing_of_bridge() {
        let plugins = json!([{"TYPE": "bridge", "IPMASQ": false}, {"type": "tuning"}]);
        let ([v4, v6], ours) = attachment_layout(&live("n", "c1", plugins, json!({}))).unwrap();
        assert!(v4.is_empty() && v6.is_empty() && ours.is_empty());
    }

    /// A cache entry forged to smuggle lines into the iptables-restore script (a name
    /// with a newline, an admin chain that is a rule) is refused, naming what is wrong.
    #[test]
    fn hostile_cache_entries_cannot_add_lines_to_the_script() {
        let injected = "c1\"\n-A INPUT -j DROP\n#";
        let e = attachment_layout(&live("n", injected, k8s(), ports())).unwrap_err();
        assert!(e.msg.contains("containerID"), "{}", e.msg);
        assert!(!e.msg.contains('\n'), "the message quotes it: {}", e.msg);
        let e = attachment_layout(&live("n\n*filter", "c1", k8s(), ports())).unwrap_err();
        assert!(e.msg.contains("network"), "{}", e.msg);
        let admin = json!([{"type": "firewall", "iptablesAdminChainName": "X -j ACCEPT\n-A INPUT"}]);
        let e = attachment_layout(&live("n", "c1", admin, json!({}))).unwrap_err();
        assert!(e.msg.contains("iptablesAdminChainName"), "{}", e.msg);
        let bad =
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp -j ACCEPT"}]});
        let e = attachment_layout(&live("n", "c1", k8s(), bad)).unwrap_err();
        assert!(e.msg.contains("portMappings: unknown protocol"), "{}", e.msg);
    }

    #[test]
    fn what_the_reference_layout_cannot_express_is_refused_by_name() {
        for (plugins, key) in [
            (json!([{"type": "bridge", "macspoofchk": true}]), "macspoofchk"),
            (json!([{"type": "portmap", "conditionsV4": ["-s", "1.2.3.4"]}]), "conditionsV4"),
            (json!([{"type": "portmap", "externalSetMarkChain": "KUBE-MARK"}]), "externalSetMarkChain"),
            (json!([{"type": "firewall", "backend": "firewalld"}]), "firewalld"),
            (json!([{"type": "firewall", "ingressPolicy": "same-bridge"}]), "ingressPolicy"),
        ] {
            let e = attachment_layout(&live("n", "c1", plugins, ports())).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(key) && e.msg.contains("\"c1\""), "{key}: {}", e.msg);
        }
        for bad in
            [json!({"hostPort": 0, "containerPort": 80}), json!({"hostPort": 70000, "containerPort": 80})]
        {
            let e = attachment_layout(&live("n", "c1", k8s(), json!({"portMappings": [bad]}))).unwrap_err();
            assert!(e.msg.contains("hostPort"), "{}", e.msg);
        }
    }
}
