//! The iptables backend: the reference's `CNI-FORWARD` / `CNI-ADMIN` layout (and its
//! isolation chains), for hosts where another tool's iptables `FORWARD` policy is DROP —
//! an accept in our own nftables table could not override that (see the nftables
//! backend's docs); an accept inside that very FORWARD chain does.
//!
//! Per operation and address family: one `iptables-save -t filter` read and at most one
//! `iptables-restore --noflush` write that holds exactly the missing (ADD) or present
//! (DEL) lines, so the change is atomic and never duplicates or fails on a rule.
//!
//! Rules are the reference's, byte for byte, so state made by the Go plugin is
//! recognised and removed by ours and vice versa. They carry no container tag (that would
//! break that compatibility), hence DEL without prevResult and GC cannot attribute rules
//! to containers and leave them alone, as the reference does.

pub mod rules;

use std::net::IpAddr;

use cni_net::nft::NftClient;
use cni_sdk::CniError;

use super::config::FirewallConf;
use super::target::Target;
use crate::common::iptables as exec;
use crate::common::reference_state;
use exec::Proto;
use rules::{FilterState, Wanted};

fn ips_of(target: &Target, proto: Proto) -> Vec<IpAddr> {
    target.ips.iter().copied().filter(|ip| ip.is_ipv4() == (proto == Proto::V4)).collect()
}

/// The families the attachment has addresses in (the reference touches only those).
fn protos(target: &Target) -> Vec<Proto> {
    [Proto::V4, Proto::V6].into_iter().filter(|p| !ips_of(target, *p).is_empty()).collect()
}

fn wanted<'a>(conf: &'a FirewallConf, target: &'a Target, proto: Proto) -> Wanted<'a> {
    Wanted {
        admin_chain: &conf.admin_chain,
        ips: ips_of(target, proto),
        policy: conf.ingress_policy,
        bridge: target.bridge.as_deref(),
    }
}

pub fn add(conf: &FirewallConf, target: &Target) -> Result<(), CniError> {
    if conf.ingress_policy != super::config::IngressPolicy::Open {
        target.require_bridge(conf.ingress_policy)?;
    }
    let _lock = exec::lock()?;
    for proto in protos(target) {
        let state = FilterState::parse(&exec::save_filter(proto)?);
        if let Some(script) = rules::add_script(&state, &wanted(conf, target, proto)) {
            if let Err(e) = exec::restore(proto, &script) {
                // Roll back what an earlier family's restore added for this container.
                if proto == Proto::V6 {
                    let _ = remove(Proto::V4, &ips_of(target, Proto::V4));
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

fn remove(proto: Proto, ips: &[IpAddr]) -> Result<(), CniError> {
    let state = FilterState::parse(&exec::save_filter(proto)?);
    match rules::del_script(&state, ips) {
        Some(script) => exec::restore(proto, &script),
        None => Ok(()),
    }
}

/// Removes the container's address rules; the shared chains, jumps and per-bridge
/// isolation rules stay (other containers use them), as in the reference.
///
/// Also the nftables backend's DEL: a node swapped from the reference (whose firewall
/// defaults to iptables) has these rules for the containers it started. Where no rule of
/// the family's `CNI-FORWARD` chain compares with the addresses (asked over netlink, no
/// process started) there is nothing to remove.
pub fn del(nft: &mut NftClient, target: Option<&Target>) -> Result<(), CniError> {
    let Some(target) = target else {
        return Ok(()); // nothing identifies the container's rules (see the module docs)
    };
    for proto in protos(target) {
        let ips = ips_of(target, proto);
        if !reference_state::any_rule_with_address(nft, proto, "filter", rules::PRIVATE_CHAIN, &ips)? {
            continue;
        }
        let _lock = exec::lock()?;
        remove(proto, &ips)?;
    }
    Ok(())
}

pub fn check(conf: &FirewallConf, target: &Target) -> Result<(), CniError> {
    for proto in protos(target) {
        let state = FilterState::parse(&exec::save_filter(proto)?);
        if let Some(what) = rules::missing(&state, &wanted(conf, target, proto)) {
            return Err(CniError::internal(format!("firewall (iptables): {what}")));
        }
    }
    Ok(())
}

/// Ready when iptables-restore and iptables-save are installed (code 50 otherwise).
pub fn status() -> Result<(), CniError> {
    exec::available(Proto::V4)
}
