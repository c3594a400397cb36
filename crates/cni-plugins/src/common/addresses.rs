//! The result of a plugin that gives the container one interface (macvlan, ipvlan, vlan,
//! dummy, tap, host-device): its addresses, from IPAM or a chain's prevResult, and how
//! the result is completed once the interface is ready.

use cni_net::Link;
use cni_sdk::delegate::{self, DelegatedAdd};
use cni_sdk::{CniError, CniResult, Request};
use cni_types::Dns;

/// The container interface's index in the result: the plugin's only interface.
pub const CONTAINER_IFACE: usize = 0;

/// The addresses for the container interface, and the IPAM allocation behind them (undone
/// on drop unless [`Addresses::complete`] runs).
pub struct Addresses<'a> {
    pub result: CniResult,
    ipam: Option<DelegatedAdd<'a>>,
}

impl<'a> Addresses<'a> {
    /// Asks the configured IPAM plugin. An answer without addresses is an error, as in the
    /// reference: an interface plugin with IPAM promises an addressed interface.
    pub fn from_ipam(req: &'a Request) -> Result<Addresses<'a>, CniError> {
        let ipam = delegate::ipam_add(req)?;
        if ipam.result().ips.is_empty() {
            return Err(CniError::internal("IPAM plugin returned missing IP config"));
        }
        let mut result = ipam.result().clone();
        for ip in &mut result.ips {
            ip.interface = Some(CONTAINER_IFACE);
        }
        Ok(Addresses { result, ipam: Some(ipam) })
    }

    /// IPAM's addresses when the configuration has an `ipam` section, none otherwise (the
    /// interface then comes up without addresses, layer 2 only).
    pub fn from_ipam_if_configured(req: &'a Request) -> Result<Addresses<'a>, CniError> {
        if delegate::has_ipam(req) {
            Addresses::from_ipam(req)
        } else {
            Ok(Addresses::none())
        }
    }

    /// The addresses, routes and DNS a chain's earlier plugin gave (ipvlan and vlan in a
    /// chain without IPAM of their own).
    pub fn from_prev_result(prev: &CniResult) -> Addresses<'a> {
        let mut result = CniResult {
            ips: prev.ips.clone(),
            routes: prev.routes.clone(),
            dns: prev.dns.clone(),
            ..Default::default()
        };
        for ip in &mut result.ips {
            ip.interface = Some(CONTAINER_IFACE);
        }
        Addresses { result, ipam: None }
    }

    /// No addresses at all.
    pub fn none() -> Addresses<'a> {
        Addresses { result: CniResult::default(), ipam: None }
    }

    /// Whether there is anything to put on the interface.
    pub fn is_empty(&self) -> bool {
        self.result.ips.is_empty()
    }

    /// The interface is in place (its rollback guard already disarmed): keeps the IPAM
    /// allocation and returns the result naming `interface`, with the configuration's `dns`
    /// when IPAM gave none.
    pub fn complete(self, interface: cni_types::Interface, dns: Option<&Dns>) -> CniResult {
        let Addresses { mut result, ipam } = self;
        result.interfaces = vec![interface];
        if let Some(dns) = dns {
            if result.dns.is_empty() {
                result.dns = dns.clone();
            }
        }
        if let Some(ipam) = ipam {
            ipam.keep();
        }
        result
    }
}

/// The result's entry for a container interface as the kernel has it now, MTU included.
pub fn interface_with_mtu(link: &Link, sandbox: &str) -> cni_types::Interface {
    cni_types::Interface { mtu: Some(link.mtu), ..super::veth::result_interface(link, sandbox) }
}
