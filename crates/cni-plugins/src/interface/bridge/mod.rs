//! `bridge`: connects the container to a Linux bridge on the host through a veth pair,
//! with addresses from the configured IPAM plugin and, optionally, the bridge as gateway.
//!
//! Rollback: the veth pair and the IPAM allocation are held by guards until ADD has
//! finished, so a failure at any step leaves neither behind. IPAM is asked before any
//! link is made (unless it needs the container's interface, as dhcp does), so a request
//! it refuses creates nothing. A bridge made before a later step failed stays (as in the
//! reference): other containers may be joining it at the same moment.
//!
//! VLANs (`vlan`, `vlanTrunk`, `preserveDefaultVlan`): see `vlan_plan.rs` and `vlan.rs`;
//! the gateway of an access VLAN lives on its own link, see `vlan_gateway.rs`. How the
//! modules layer: `config.rs`.

pub(crate) mod config;
mod gateway;
mod spoofcheck;
mod vlan;
mod vlan_gateway;
mod vlan_plan;

use crate::common::iface;
use crate::common::veth::{self, VethRequest};
use crate::common::{masq, nft_attach, open_container_netns, DelErrors, NetResultExt};
use cni_net::netlink::{BridgeOptions, BridgeVlanSettings, LinkCondition, LinkKind, LinkSpec};
use cni_net::{Link, MacAddr, NetNs, Netlink};
use cni_sdk::{delegate, CniError, CniResult, GcErrors, Plugin, Request};
pub(crate) use config::BridgeConf;
use ipnet::IpNet;
use std::time::Duration;

/// Result interface indexes: the bridge is 0, then the host veth, then the container's
/// (and, for an access VLAN's gateway, its link last).
const HOST_IFACE: usize = 1;
const CONTAINER_IFACE: usize = 2;

pub struct Bridge;

/// The bridge, created if missing. A concurrent ADD creating it first is success.
fn ensure_bridge(nl: &mut Netlink, conf: &BridgeConf, options: &BridgeOptions) -> Result<Link, CniError> {
    let existing = match nl.link_by_name(&conf.bridge).or_cni("look up bridge")? {
        Some(link) => link,
        None => {
            let mut spec = LinkSpec::new(conf.bridge.clone());
            if let Some(mtu) = conf.mtu() {
                spec = spec.mtu(mtu);
            }
            match nl.add_bridge(&spec, options) {
                Ok(Some(link)) => {
                    iface::skip_link_local_dad(&link.name)?;
                    link
                }
                Err(e) if e.is_already_exists() => nl.require_link(&conf.bridge).or_cni("look up bridge")?,
                Ok(None) => return Err(CniError::internal("bridge was not created in this namespace")),
                Err(e) if options.vlan_filtering.is_some() => {
                    return Err(vlan::filtering_error(&conf.bridge, &e))
                }
                Err(e) => {
                    return Err(CniError::internal(format!("could not add bridge {:?}: {e}", conf.bridge)))
                }
            }
        }
    };
    if existing.kind != LinkKind::Bridge {
        return Err(CniError::internal(format!("{:?} already exists but is not a bridge", conf.bridge)));
    }
    // Also on a bridge someone else made, as the reference does: it now faces containers.
    iface::refuse_router_advertisements(&existing.name)?;
    if conf.promisc_mode && !existing.promisc {
        nl.set_link_promisc(existing.index, true).or_cni("set bridge promiscuous")?;
    }
    if !existing.up {
        nl.set_link_up(existing.index).or_cni("set bridge up")?;
    }
    Ok(existing)
}

/// Waits until the bridge forwards through the new port. The kernel enables a port whose
/// carrier came on only when its link watcher runs, a moment after the carrier flag is set:
/// a frame sent before is dropped (dhcp's first DISCOVER was, costing a 1 s retransmit).
/// The watcher marks the link operationally up once the bridge has handled it.
fn wait_for_port(host_nl: &mut Netlink, host_veth: &Link) -> Result<(), CniError> {
    host_nl
        .wait_for_link(host_veth.index, LinkCondition::Running, Duration::from_secs(5))
        .or_cni("wait for the bridge port")?;
    Ok(())
}

/// Host end of the pair: on the bridge, with the port options and VLANs, up.
fn attach_host_end(
    nl: &mut Netlink,
    host: &Link,
    bridge: &Link,
    conf: &BridgeConf,
    vlans: Option<(&vlan_plan::PortPlan, &BridgeVlanSettings)>,
) -> Result<(), CniError> {
    nl.set_link_master(host.index, bridge.index)
        .or_cni(&format!("connect {} to bridge {}", host.name, bridge.name))?;
    if let Some((plan, settings)) = vlans {
        vlan::configure_port(nl, host, plan, settings)?;
    }
    if conf.hairpin_mode {
        nl.set_bridge_port_hairpin(host.index, true).or_cni("set hairpin mode")?;
    }
    if conf.port_isolation {
        nl.set_bridge_port_isolated(host.index, true).or_cni("set port isolation")?;
    }
    nl.set_link_up(host.index).or_cni(&format!("set {} up", host.name))
}

/// The access VLAN whose gateway link this config makes (`isGateway` with `vlan`). Read
/// from the raw config: DEL and GC clean up whatever an ADD may have made.
fn gateway_vlan(conf: &BridgeConf) -> Option<u16> {
    let vid = u16::try_from(conf.vlan).ok().filter(|v| (1..=cni_net::netlink::MAX_VLAN_ID).contains(v))?;
    (conf.is_gateway || conf.is_default_gateway).then_some(vid)
}

fn requested_mac(req: &Request) -> Result<Option<MacAddr>, CniError> {
    cni_sdk::args::requested_mac(req)?
        .map(|m| {
            m.parse::<MacAddr>().map_err(|_| CniError::invalid_config(format!("invalid MAC address {m:?}")))
        })
        .transpose()
}

/// What ADD made of the bridge as the containers' gateway.
struct GatewaySide {
    /// The access VLAN's gateway link, when the gateway lives there rather than on the bridge.
    vlan_link: Option<Link>,
    /// Whether the bridge's MAC was pinned (else it may follow its ports' as they churn).
    bridge_mac_pinned: bool,
}

/// Puts the gateway addresses on the bridge (or on the access VLAN's gateway link), pins
/// the bridge's MAC and turns forwarding on for each family that has a gateway.
fn serve_as_gateway(
    nl: &mut Netlink,
    bridge: &Link,
    conf: &BridgeConf,
    plan: &vlan_plan::PortPlan,
    bridge_addresses: &[IpNet],
) -> Result<GatewaySide, CniError> {
    let mut vlan_link = None;
    if conf.is_gateway && plan.access != 0 {
        if !bridge_addresses.is_empty() {
            vlan_link =
                Some(vlan_gateway::ensure(nl, bridge, plan.access, bridge_addresses, conf.force_address)?);
        }
    } else {
        for gw in bridge_addresses {
            gateway::ensure_address(nl, bridge, *gw, conf.force_address)?;
        }
    }
    let mut bridge_mac_pinned = false;
    if !bridge_addresses.is_empty() {
        // Pin the bridge's MAC: otherwise it follows the lowest port MAC as ports churn.
        if let Some(mac) = bridge.mac {
            nl.set_link_mac(bridge.index, mac).or_cni("pin bridge MAC")?;
            bridge_mac_pinned = true;
        }
    }
    for v4 in [true, false] {
        if bridge_addresses.iter().any(|a| a.addr().is_ipv4() == v4) {
            crate::common::enable_forwarding(v4)?;
        }
    }
    Ok(GatewaySide { vlan_link, bridge_mac_pinned })
}

/// The result's interfaces, in the order of the index constants above: the bridge as it
/// is now, the host veth, the container's, and the access VLAN's gateway link if any.
fn result_interfaces(
    nl: &mut Netlink,
    bridge: &Link,
    gateway: &GatewaySide,
    host_veth: &Link,
    container_link: &Link,
    netns: &str,
) -> Result<Vec<cni_types::Interface>, CniError> {
    // An unpinned bridge's MAC may have followed the new port's; the veth's stays.
    let bridge_now = if gateway.bridge_mac_pinned {
        bridge.clone()
    } else {
        nl.require_link(&bridge.name).or_cni("look up bridge")?
    };
    let mut interfaces = vec![
        veth::result_interface(&bridge_now, ""),
        veth::result_interface(host_veth, ""),
        veth::result_interface(container_link, netns),
    ];
    interfaces.extend(gateway.vlan_link.iter().map(|link| veth::result_interface(link, "")));
    Ok(interfaces)
}

/// The attachment's nftables state: masquerade and the MAC spoof check, in one batch (one
/// transaction for the kernel to make and commit): all or nothing.
fn add_firewall_rules(
    req: &Request,
    conf: &BridgeConf,
    result: &CniResult,
    host_port: &Link,
    container_link: &Link,
) -> Result<(), CniError> {
    let who = req.attachment();
    let mut parts = Vec::new();
    if conf.ip_masq {
        parts.push(masq::part(req, &who, result, CONTAINER_IFACE)?);
    }
    if conf.mac_spoof_check {
        let mac = container_link.mac.ok_or_else(|| CniError::internal("container interface has no MAC"))?;
        parts.push(spoofcheck::part(req, &who, &host_port.name, mac)?);
    }
    if parts.is_empty() {
        return Ok(());
    }
    nft_attach::attach_all(&mut *nft_attach::client()?, &req.conf.name, &who, &parts)
}

impl Bridge {
    fn add_attachment(
        &self,
        req: &Request,
        conf: &BridgeConf,
        plan: &vlan_plan::PortPlan,
        ns: &NetNs,
    ) -> Result<CniResult, CniError> {
        // Everything that can refuse the request comes before the first link is made.
        let container_mac = requested_mac(req)?;
        let mut ipam = match delegate::has_ipam(req) && !delegate::ipam_needs_interface(req) {
            true => Some(delegate::ipam_add(req)?),
            false => None,
        };
        let mut host_nl = Netlink::new().or_cni("open netlink")?;
        let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        let bridge = ensure_bridge(&mut host_nl, conf, &vlan::bridge_options(plan))?;
        let vlan_settings = match plan.in_use() {
            true => Some(vlan::ensure_filtering(&mut host_nl, &bridge)?),
            false => None,
        };
        let (host_veth, cont_link) = veth::create_pair(
            &mut host_nl,
            &mut cont_nl,
            &VethRequest { container_ns: ns, container_ifname: &req.ifname, mtu: conf.mtu(), container_mac },
        )?;
        let has_ipam = delegate::has_ipam(req);
        iface::prepare_container_interface(ns, req, &cont_link.name, has_ipam, iface::Announce::Yes)?;
        attach_host_end(
            &mut host_nl,
            &host_veth.link,
            &bridge,
            conf,
            vlan_settings.as_ref().map(|s| (plan, s)),
        )?;

        if ipam.is_none() && delegate::has_ipam(req) {
            // This IPAM plugin (dhcp) talks through the new port: the container end is up
            // and the port forwards before it starts.
            cont_nl.set_link_up(cont_link.index).or_cni("set the container interface up")?;
            wait_for_port(&mut host_nl, &host_veth.link)?;
            ipam = Some(delegate::ipam_add(req)?);
        }
        let mut result = ipam.as_ref().map(|a| a.result().clone()).unwrap_or_default();
        if ipam.is_some() && result.ips.is_empty() {
            return Err(CniError::internal("IPAM plugin returned missing IP config"));
        }
        let bridge_addresses = gateway::plan(&mut result, conf, CONTAINER_IFACE);
        if conf.disable_container_interface {
            cont_nl.set_link_down(cont_link.index).or_cni("keep container interface down")?;
        } else {
            iface::configure(&mut cont_nl, &cont_link, &result, CONTAINER_IFACE, conf.enable_dad)?;
        }
        let gateway = serve_as_gateway(&mut host_nl, &bridge, conf, plan, &bridge_addresses)?;
        if !conf.disable_container_interface {
            wait_for_port(&mut host_nl, &host_veth.link)?;
        }

        result.interfaces =
            result_interfaces(&mut host_nl, &bridge, &gateway, &host_veth.link, &cont_link, &req.netns)?;
        // The configured `dns` wins over IPAM's, as in the reference (which only skips a
        // configured `dns` that sets nothing).
        if let Some(dns) = conf.dns.as_ref().filter(|dns| !dns.is_empty()) {
            result.dns = dns.clone();
        }
        // Firewalling last: every step before it can fail without nftables state to undo.
        add_firewall_rules(req, conf, &result, &host_veth.link, &cont_link)?;
        host_veth.keep();
        if let Some(ipam) = ipam {
            ipam.keep();
        }
        Ok(result)
    }
}

impl Plugin for Bridge {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = BridgeConf::load(req)?;
        let plan = conf.vlan_plan()?;
        let ns = open_container_netns(req)?;
        let added = self.add_attachment(req, &conf, &plan, &ns);
        if added.is_err() && conf.is_gateway && plan.access != 0 {
            // The failed ADD's port is gone by now: its VLAN's gateway goes too, unless
            // another port is on that VLAN.
            let released = Netlink::new()
                .or_cni("open netlink")
                .and_then(|mut nl| vlan_gateway::release_if_unused(&mut nl, &conf.bridge, plan.access));
            if let Err(e) = released {
                eprintln!("rollback: VLAN gateway: {e}");
            }
        }
        added
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        // Not `load`: DEL must clean up even what a config refused at ADD would describe.
        let conf: BridgeConf = req.config()?;
        // Links and rules go before the IPAM release, and every step runs even after one
        // failed: damaged IPAM state must not keep the host veth alive (a runtime retries
        // a failed DEL, forever if the damage stays).
        let mut errors = DelErrors::new();
        // dhcp releases its lease over the container's interface: it goes while that is
        // still there (its failure is recorded, and the links still go).
        let ipam_first = delegate::has_ipam(req) && delegate::ipam_needs_interface(req);
        if ipam_first {
            errors.record("the IPAM plugin's allocations", delegate::ipam_forward(req));
        }
        let prev = req.prev_result().ok().flatten();
        let prev_host_port =
            prev.as_ref().and_then(|p| p.interfaces.get(HOST_IFACE)).map(|i| i.name.as_str());
        let uses_vlans = conf.vlan != 0 || !conf.vlan_trunk.is_empty();
        if uses_vlans {
            errors.record("the port's VLANs", vlan::retire_port(req, &conf, prev_host_port));
        }
        // The veth is taken out of service first (its deletion then continues in the
        // background), so no traffic leaves through masquerade rules about to go.
        errors.record("the container's veth", veth::delete_container_end(req));
        if let Some(vid) = gateway_vlan(&conf) {
            let released = Netlink::new()
                .or_cni("open netlink")
                .and_then(|mut nl| vlan_gateway::release_if_unused(&mut nl, &conf.bridge, vid));
            errors.record("the VLAN gateway", released);
        }
        if conf.ip_masq {
            errors.record("the masquerade rules", masq::del(req, prev.as_ref()));
        }
        if conf.mac_spoof_check {
            errors.record("the MAC spoof-check rules", spoofcheck::del(req, prev_host_port));
        }
        if delegate::has_ipam(req) && !ipam_first {
            errors.record("the IPAM plugin's allocations", delegate::ipam_forward(req));
        }
        errors.into_result()
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = BridgeConf::load(req)?;
        let prev = req.require_prev_result()?;
        delegate::ipam_forward_if_configured(req)?;
        let ns = open_container_netns(req)?;
        let mut cont_nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let cont = iface::check_link(&mut cont_nl, &prev, CONTAINER_IFACE)?;
        if cont.kind != LinkKind::Veth {
            return Err(CniError::internal(format!("{} is not a veth", cont.name)));
        }
        iface::check_addresses(&mut cont_nl, &cont, &prev, CONTAINER_IFACE)?;
        iface::check_routes(&mut cont_nl, &cont, &prev, CONTAINER_IFACE)?;

        let mut host_nl = Netlink::new().or_cni("open netlink")?;
        let bridge = host_nl
            .link_by_name(&conf.bridge)
            .or_cni("look up bridge")?
            .filter(|l| l.kind == LinkKind::Bridge)
            .ok_or_else(|| CniError::internal(format!("bridge {} is missing", conf.bridge)))?;
        let host = iface::check_link(&mut host_nl, &prev, HOST_IFACE)?;
        if cont.link != Some(host.index) {
            return Err(CniError::internal(format!("{} is not the peer of {}", host.name, cont.name)));
        }
        if host.master != Some(bridge.index) {
            return Err(CniError::internal(format!(
                "{} is not connected to bridge {}",
                host.name, bridge.name
            )));
        }
        let plan = conf.vlan_plan()?;
        if plan.in_use() {
            vlan::check_port(&mut host_nl, &bridge, &host, &plan)?;
        }
        if conf.is_gateway && plan.access != 0 && prev.ips.iter().any(|ip| ip.gateway.is_some()) {
            vlan_gateway::check(&mut host_nl, &bridge, plan.access, &prev)?;
        }
        if conf.ip_masq {
            masq::check(req)?;
        }
        if conf.mac_spoof_check {
            spoofcheck::check(req)?;
        }
        Ok(())
    }

    /// Releases IPAM and the nftables state of attachments the runtime no longer has,
    /// whatever the current config says about ipMasq/macspoofchk (they may have been on).
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req.valid_attachments()?;
        let mut errors = GcErrors::new();
        errors.record("the IPAM plugin's allocations", delegate::ipam_forward_if_configured(req));
        errors.merge(masq::gc(&req.conf.name, &valid));
        errors.merge(spoofcheck::gc(&req.conf.name, &valid));
        // A gateway whose last port vanished without a DEL (the host rebooted into the
        // same config, a crashed runtime): nothing uses it any more.
        if let Ok(conf) = req.config::<BridgeConf>() {
            if let Some(vid) = gateway_vlan(&conf) {
                let released = Netlink::new()
                    .or_cni("open netlink")
                    .and_then(|mut nl| vlan_gateway::release_if_unused(&mut nl, &conf.bridge, vid));
                errors.record("the VLAN gateway", released);
            }
        }
        Ok(errors.into_result()?)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn about(&self) -> String {
        "bridge: connects containers to a Linux bridge through veth pairs".into()
    }
}
