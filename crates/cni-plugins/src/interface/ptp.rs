//! `ptp`: a veth pair per container with routed point-to-point addressing.
//!
//! The container gets its address with the subnet's prefix, but the subnet route is
//! replaced by a link route to the gateway and a route to the subnet via the gateway, so
//! all traffic goes through the host. The host end carries the gateway as a /32 (/128)
//! and a host route to the container.

use crate::common::iface;
use crate::common::veth::{self, VethRequest};
use crate::common::{masq, open_container_netns, DelErrors, NetResultExt};
use cni_net::netlink::{AddressFlags, Route as KernelRoute, RouteScope};
use cni_net::Idempotent;
use cni_net::{Link, NetNs, Netlink};
use cni_sdk::{delegate, CniError, CniResult, GcErrors, Plugin, Request};
use cni_types::Dns;
use ipnet::IpNet;
use serde::Deserialize;

const HOST_IFACE: usize = 0;
const CONTAINER_IFACE: usize = 1;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PtpConf {
    #[serde(default)]
    ip_masq: bool,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    dns: Option<Dns>,
}

impl PtpConf {
    pub(crate) fn load(req: &Request) -> Result<PtpConf, CniError> {
        let conf: PtpConf = req.config()?;
        if !delegate::has_ipam(req) {
            return Err(CniError::invalid_config("ptp needs an ipam section: ipam.type is missing"));
        }
        if conf.mtu != 0 && !(68..=65535).contains(&conf.mtu) {
            return Err(CniError::invalid_config(format!(
                "invalid mtu {}: must be between 68 and 65535",
                conf.mtu
            )));
        }
        Ok(conf)
    }
}

fn host_prefix(addr: std::net::IpAddr) -> IpNet {
    IpNet::new(addr, if addr.is_ipv4() { 32 } else { 128 }).expect("full-length prefix")
}

/// Container side: addresses, then the subnet route swapped for gateway routes.
fn configure_container(nl: &mut Netlink, link: &Link, result: &CniResult) -> Result<(), CniError> {
    iface::configure(nl, link, result, CONTAINER_IFACE, false)?;
    for ip in result.ips_of(Some(CONTAINER_IFACE)) {
        let gateway = ip.gateway.expect("checked before");
        let subnet = ip.address.trunc();
        let kernel_subnet_route = KernelRoute::new(subnet).oif(link.index).scope(RouteScope::Link);
        nl.delete_route(&kernel_subnet_route)
            .ignore_missing()
            .map_err(|e| CniError::internal(format!("delete route {subnet}: {e}")))?;
        let mut to_gateway = KernelRoute::new(host_prefix(gateway)).oif(link.index).scope(RouteScope::Link);
        to_gateway.source = Some(ip.address.addr());
        let mut via_gateway = KernelRoute::new(subnet).oif(link.index).gateway(gateway);
        via_gateway.source = Some(ip.address.addr());
        for route in [to_gateway, via_gateway] {
            nl.add_route(&route)
                .ignore_exists()
                .map_err(|e| CniError::internal(format!("add route {}: {e}", route.destination)))?;
        }
    }
    Ok(())
}

/// Host side: the gateway address on the host end and a host route to the container.
fn configure_host(nl: &mut Netlink, link: &Link, result: &CniResult) -> Result<(), CniError> {
    for ip in result.ips_of(Some(CONTAINER_IFACE)) {
        let gateway = ip.gateway.expect("checked before");
        let flags = if gateway.is_ipv4() { AddressFlags::empty() } else { AddressFlags::Nodad };
        nl.add_address(link.index, host_prefix(gateway), flags)
            .ignore_exists()
            .map_err(|e| CniError::internal(format!("add {gateway} to {}: {e}", link.name)))?;
        let route = KernelRoute::new(host_prefix(ip.address.addr())).oif(link.index).scope(RouteScope::Link);
        nl.add_route(&route)
            .ignore_exists()
            .map_err(|e| CniError::internal(format!("add host route to {}: {e}", ip.address.addr())))?;
    }
    Ok(())
}

pub struct Ptp;

impl Ptp {
    fn add_attachment(&self, req: &Request, conf: &PtpConf, ns: &NetNs) -> Result<CniResult, CniError> {
        let ipam = delegate::ipam_add(req)?;
        let mut result = ipam.result().clone();
        if result.ips.is_empty() {
            return Err(CniError::internal("IPAM plugin returned missing IP config"));
        }
        if let Some(ip) = result.ips.iter().find(|ip| ip.gateway.is_none()) {
            return Err(CniError::internal(format!(
                "ptp needs a gateway for {}: IPAM returned none",
                ip.address
            )));
        }
        let mut host_nl = Netlink::new().or_cni("open netlink")?;
        let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        let (host_veth, cont_link) = veth::create_pair(
            &mut host_nl,
            &mut cont_nl,
            &VethRequest {
                container_ns: ns,
                container_ifname: &req.ifname,
                mtu: (conf.mtu != 0).then_some(conf.mtu),
                container_mac: None,
            },
        )?;
        crate::common::iface::refuse_router_addresses(ns, req, &cont_link.name, true)?;
        if result.ips.iter().any(|ip| ip.address.addr().is_ipv6()) {
            crate::common::iface::skip_link_local_dad(&host_veth.link.name)?;
        }
        host_nl.set_link_up(host_veth.link.index).or_cni("set host veth up")?;
        for ip in &mut result.ips {
            ip.interface = Some(CONTAINER_IFACE);
        }
        configure_container(&mut cont_nl, &cont_link, &result)?;
        configure_host(&mut host_nl, &host_veth.link, &result)?;
        for v4 in [true, false] {
            if result.ips.iter().any(|ip| ip.is_ipv4() == v4) {
                crate::common::enable_forwarding(v4)?;
            }
        }
        let host_now = host_nl
            .link_by_index(host_veth.link.index)
            .or_cni("look up host veth")?
            .unwrap_or(host_veth.link.clone());
        result.interfaces =
            vec![veth::result_interface(&host_now, ""), veth::result_interface(&cont_link, &req.netns)];
        // The configured `dns` wins over IPAM's, as in the reference (which only skips a
        // configured `dns` that sets nothing).
        if let Some(dns) = conf.dns.as_ref().filter(|dns| !dns.is_empty()) {
            result.dns = dns.clone();
        }
        if conf.ip_masq {
            masq::add(req, &result, CONTAINER_IFACE)?;
        }
        host_veth.keep();
        ipam.keep();
        Ok(result)
    }
}

impl Plugin for Ptp {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = PtpConf::load(req)?;
        let ns = open_container_netns(req)?;
        self.add_attachment(req, &conf, &ns)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf: PtpConf = req.config()?;
        // As in bridge: links and rules first, the IPAM release last, every step run even
        // after one failed, and the failures reported together.
        let mut errors = DelErrors::new();
        // The veth is taken out of service first (its deletion continues in the
        // background), so no traffic leaves through masquerade rules about to go.
        errors.record("the container's veth", veth::delete_container_end(req));
        if conf.ip_masq {
            errors.record("the masquerade rules", masq::del(req, req.prev_result().ok().flatten().as_ref()));
        }
        errors.record("the IPAM plugin's allocations", delegate::ipam_forward_if_configured(req));
        errors.into_result()
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = PtpConf::load(req)?;
        if conf.ip_masq {
            masq::check(req)?;
        }
        let prev = req.require_prev_result()?;
        delegate::ipam_forward(req)?;
        let ns = open_container_netns(req)?;
        let mut cont_nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let cont = iface::check_link(&mut cont_nl, &prev, CONTAINER_IFACE)?;
        iface::check_addresses(&mut cont_nl, &cont, &prev, CONTAINER_IFACE)?;
        let mut host_nl = Netlink::new().or_cni("open netlink")?;
        let host = iface::check_link(&mut host_nl, &prev, HOST_IFACE)?;
        if cont.link != Some(host.index) {
            return Err(CniError::internal(format!("{} is not the peer of {}", host.name, cont.name)));
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req.valid_attachments()?;
        let mut errors = GcErrors::new();
        errors.record("the IPAM plugin's allocations", delegate::ipam_forward(req));
        errors.merge(masq::gc(&req.conf.name, &valid));
        Ok(errors.into_result()?)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }

    fn about(&self) -> String {
        "ptp: routed point-to-point veth pairs".into()
    }
}
