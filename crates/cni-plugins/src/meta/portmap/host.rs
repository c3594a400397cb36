//! What portmap does on the host besides nftables: picking the container's addresses,
//! letting 127.0.0.1 be routed to the container (`route_localnet`), and flushing stale UDP
//! conntrack entries.

use crate::common::NetResultExt;
use cni_net::netlink::{IpFamily, MAIN_TABLE};
use cni_net::nft::conntrack::ConntrackClient;
use cni_net::nft::{proto, Family};
use cni_net::Netlink;
use cni_sdk::{CniError, CniResult};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The container's address of each family that mappings lead to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContainerIps {
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
}

/// The result's addresses of the container interface `ifname`, in order: those the result
/// ties to another interface, or to one outside the sandbox (e.g. a bridge's gateway
/// address), are skipped, as the reference skips them.
pub fn container_addresses<'r>(result: &'r CniResult, ifname: &'r str) -> impl Iterator<Item = IpNet> + 'r {
    result
        .ips
        .iter()
        .filter(move |ip| {
            let iface = ip.interface.and_then(|index| result.interfaces.get(index));
            !iface.is_some_and(|i| i.name != ifname || i.sandbox.is_empty())
        })
        .map(|ip| ip.address)
}

impl ContainerIps {
    /// As the reference picks them: the first of each family of [`container_addresses`].
    pub fn from_result(result: &CniResult, ifname: &str) -> ContainerIps {
        let mut ips = ContainerIps::default();
        for address in container_addresses(result, ifname) {
            match address.addr() {
                IpAddr::V4(a) if ips.v4.is_none() => ips.v4 = Some(a),
                IpAddr::V6(a) if ips.v6.is_none() => ips.v6 = Some(a),
                _ => {}
            }
        }
        ips
    }

    pub fn get(&self, v6: bool) -> Option<IpAddr> {
        if v6 {
            self.v6.map(IpAddr::V6)
        } else {
            self.v4.map(IpAddr::V4)
        }
    }
}

/// The host interface traffic to `container` leaves by (the most specific route of the
/// main table with an interface), as the reference finds it with a route lookup.
fn routable_host_interface(nl: &mut Netlink, container: Ipv4Addr) -> Result<Option<String>, CniError> {
    let routes = nl.routes(IpFamily::V4, Some(MAIN_TABLE)).or_cni("list routes")?;
    let best = routes
        .iter()
        .filter(|r| r.oif.is_some() && r.destination.contains(&IpAddr::V4(container)))
        .max_by_key(|r| r.destination.prefix_len());
    let Some(index) = best.and_then(|r| r.oif) else { return Ok(None) };
    Ok(nl.link_by_index(index).or_cni("look up the host interface")?.map(|l| l.name))
}

/// Lets connections to 127.0.0.1:<hostPort> be DNATed to the container: without
/// `route_localnet` on the interface towards it, the kernel drops packets with a loopback
/// source there. (IPv6 has no such switch, so `[::1]:<hostPort>` is not mapped, as in the
/// reference.) The interface is the first host-side one of the interface plugin's result
/// (the bridge, or ptp's host veth) — no lookup that grows with the host's routes — and
/// otherwise the one the routing table sends the container's traffic to.
pub fn enable_localnet_routing(result: &CniResult, container: Ipv4Addr) -> Result<(), CniError> {
    let from_result = result.interfaces.iter().find(|i| i.sandbox.is_empty() && !i.name.is_empty());
    let ifname = match from_result {
        Some(iface) => iface.name.clone(),
        None => {
            let mut nl = Netlink::new().or_cni("open netlink")?;
            match routable_host_interface(&mut nl, container)? {
                Some(name) => name,
                None => return Ok(()),
            }
        }
    };
    // The name comes from prevResult and ends up in a /proc/sys path.
    cni_types::validate::validate_interface_name_field("prevResult interface name", &ifname)?;
    let key = format!("net.ipv4.conf.{ifname}.route_localnet");
    if cni_net::sysctl::read(&key).map(|v| v.trim() == "1").unwrap_or(false) {
        return Ok(());
    }
    cni_net::sysctl::write(&key, "1").or_cni(&format!("set {key}"))
}

/// Removes conntrack entries of UDP traffic to `host_port`: they would otherwise keep
/// steering packets to whatever the port pointed at before, until they time out. Failure
/// is logged, not fatal, as in the reference.
pub fn flush_udp_conntrack(v6: bool, host_port: u16) {
    let family = if v6 { Family::Ipv6 } else { Family::Ipv4 };
    let outcome = ConntrackClient::new().and_then(|mut ct| ct.delete_matching(family, proto::UDP, host_port));
    if let Err(e) = outcome {
        eprintln!("portmap: cannot delete stale UDP conntrack entries for port {host_port}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_ips_skip_other_interfaces() {
        let result = CniResult::from_value(
            json!({"cniVersion": "1.0.0",
                "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
                "ips": [{"address": "10.0.0.1/24", "interface": 0},
                        {"address": "10.0.0.5/24", "interface": 2},
                        {"address": "10.0.0.6/24", "interface": 2},
                        {"address": "fd00::5/64", "interface": 2}]}),
            cni_sdk::Version::V1_0_0,
        )
        .unwrap();
        let ips = ContainerIps::from_result(&result, "eth0");
        assert_eq!(ips.v4, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(ips.v6, Some("fd00::5".parse().unwrap()));
        assert_eq!(ContainerIps::from_result(&result, "eth1"), ContainerIps::default());
    }
}
