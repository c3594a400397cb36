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
use crate::meta::firewall::nftables::FirewallTable;
use crate::meta::portmap::rules as portmap_rules;
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

/// A key of a plugin configuration, matched without regard to case as the reference's
/// decoder matches it.
fn key<'a>(conf: &'a Value, name: &str) -> Option<&'a Value> {
    conf.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v)
}

fn plugin_type(conf: &Value) -> &str {
    key(conf, "type").and_then(Value::as_str).unwrap_or("")
}

fn refuse(live: &LiveAttachment, what: String) -> CniError {
    CniError::invalid_config(format!(
        "cannot hand {} (network {:?}, interface {}) over to the reference plugins: {what}",
        live.container_id, live.network, live.ifname
    ))
}

/// The container interface's addresses (with their prefixes), first of each family in
/// `first_only`, as the reference's portmap picks them.
fn container_addresses(live: &LiveAttachment, first_only: bool) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = Vec::new();
    for ip in &live.result.ips {
        let iface = ip.interface.and_then(|i| live.result.interfaces.get(i));
        if iface.is_some_and(|i| i.name != live.ifname || i.sandbox.is_empty()) {
            continue;
        }
        if !first_only || !out.iter().any(|o| o.addr().is_ipv4() == ip.address.addr().is_ipv4()) {
            out.push(ip.address);
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
    for unsupported in ["conditionsV4", "conditionsV6", "masqAll"] {
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
        set_mark_chain: key(conf, "externalSetMarkChain").and_then(Value::as_str).map(str::to_string),
    })
}

/// The reference's layout for one attachment in each family, and our tables it uses.
fn attachment_layout(live: &LiveAttachment) -> Result<([Layout; 2], Vec<OurTable>), CniError> {
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
                let admin =
                    key(conf, "iptablesAdminChainName").and_then(Value::as_str).unwrap_or("CNI-ADMIN");
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
