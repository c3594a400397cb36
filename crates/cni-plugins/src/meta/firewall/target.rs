//! What the firewall needs to know about an attachment, read from the previous result.

use cni_net::netlink::Netlink;
use cni_sdk::{CniError, CniResult, Request};
use cni_types::validate::validate_interface_name_field;
use std::net::IpAddr;

use super::config::IngressPolicy;

/// The container's addresses and, for bridge attachments, the bridge and the host-side port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// Every address of the result (the reference opens all of them).
    pub ips: Vec<IpAddr>,
    /// The bridge: the reference takes the result's first interface.
    pub bridge: Option<String>,
    /// The host end of the container's veth: the first host-side interface after the bridge.
    pub host_port: Option<String>,
}

impl Target {
    pub fn from_result(result: &CniResult) -> Target {
        let ips = result.ips.iter().map(|ip| ip.address.addr()).collect();
        let first = result.interfaces.first().filter(|i| i.sandbox.is_empty() && !i.name.is_empty());
        let bridge = first.map(|i| i.name.clone());
        let host_port = result
            .interfaces
            .iter()
            .skip(1)
            .find(|i| i.sandbox.is_empty() && !i.name.is_empty() && Some(&i.name) != bridge.as_ref())
            .map(|i| i.name.clone());
        Target { ips, bridge, host_port }
    }

    /// The global addresses of CNI_IFNAME in CNI_NETNS, for a DEL that got no prevResult.
    /// Best effort: `None` when the namespace or the interface is gone or unreadable, or
    /// holds no such address (then there is nothing left to identify the rules by).
    pub fn from_container(req: &Request) -> Option<Target> {
        let ns = crate::common::open_container_netns_for_del(req).ok().flatten()?;
        let mut nl = Netlink::in_ns(&ns).ok()?;
        let link = nl.link_by_name(&req.ifname).ok().flatten()?;
        let addresses = nl.addresses(Some(link.index), None).ok()?;
        // Scope 0 (universe): link-local and host addresses never got rules.
        let ips: Vec<IpAddr> = addresses.iter().filter(|a| a.scope == 0).map(|a| a.address.addr()).collect();
        (!ips.is_empty()).then(|| Target { ips, ..Target::default() })
    }

    /// The bridge a non-open policy works on; an error (code 7) when the result has none.
    pub fn require_bridge(&self, policy: IngressPolicy) -> Result<&str, CniError> {
        let bridge = self.bridge.as_deref().ok_or_else(|| {
            CniError::invalid_config(format!(
                "ingressPolicy {}: the previous result names no bridge interface; chain \"firewall\" after \"bridge\"",
                policy_name(policy)
            ))
        })?;
        validate_interface_name_field("prevResult bridge interface name", bridge)?;
        Ok(bridge)
    }

    /// The container's bridge port, which the `isolated` policy cuts off from its siblings.
    pub fn require_host_port(&self) -> Result<&str, CniError> {
        let port = self.host_port.as_deref().ok_or_else(|| {
            CniError::invalid_config(
                "ingressPolicy isolated: the previous result names no host-side bridge port; chain \"firewall\" after \"bridge\"",
            )
        })?;
        validate_interface_name_field("prevResult host interface name", port)?;
        Ok(port)
    }
}

pub fn policy_name(policy: IngressPolicy) -> &'static str {
    match policy {
        IngressPolicy::Open => "open",
        IngressPolicy::SameBridge => "same-bridge",
        IngressPolicy::Isolated => "isolated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_sdk::Version;

    #[test]
    fn bridge_result_gives_bridge_port_and_ips() {
        let v = serde_json::json!({"cniVersion":"1.0.0",
            "interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},{"name":"veth1234","mac":"00:11:22:33:44:66"},
                          {"name":"eth0","sandbox":"/run/netns/x"}],
            "ips":[{"interface":2,"address":"10.88.0.5/16"},{"interface":2,"address":"fd00::5/64"}]});
        let r = CniResult::from_value(v, Version::V1_0_0).unwrap();
        let t = Target::from_result(&r);
        assert_eq!(t.bridge.as_deref(), Some("cni0"));
        assert_eq!(t.host_port.as_deref(), Some("veth1234"));
        assert_eq!(t.ips, vec!["10.88.0.5".parse::<IpAddr>().unwrap(), "fd00::5".parse().unwrap()]);
    }

    #[test]
    fn result_without_interfaces_has_no_bridge() {
        let v = serde_json::json!({"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.2/24"}});
        let r = CniResult::from_value(v, Version::V0_2_0).unwrap();
        let t = Target::from_result(&r);
        assert_eq!(t.bridge, None);
        assert_eq!(t.require_bridge(IngressPolicy::SameBridge).unwrap_err().code, 7);
        assert_eq!(t.require_host_port().unwrap_err().code, 7);
    }
}
