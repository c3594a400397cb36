//! `ipvlan`: an IPvlan link on a `master` device, made in the container under CNI_IFNAME.
//! The links share the master's MAC address; `mode` l2 switches by MAC, l3/l3s route.
//!
//! In a chain the master may come from the prevResult (its single interface; when that
//! one is in the container, so is the master), and without an ipam section the
//! prevResult's addresses are put on the new link.

use crate::common::container_link;
use crate::common::open_container_netns;
use crate::common::sublink::{self, Addressing};
use cni_net::netlink::{IpvlanMode, LinkKind};
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};
use cni_types::Dns;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IpvlanConf {
    #[serde(default)]
    master: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    link_in_container: bool,
    #[serde(default)]
    dns: Option<Dns>,
}

impl IpvlanConf {
    pub(crate) fn load(req: &Request) -> Result<(IpvlanConf, IpvlanMode), CniError> {
        let conf: IpvlanConf = req.config()?;
        let mode = match conf.mode.as_str() {
            "" => IpvlanMode::L2,
            text => text.parse().map_err(|_| {
                CniError::invalid_config(format!("invalid mode {text:?}: must be l2, l3 or l3s"))
            })?,
        };
        container_link::validate_mtu(conf.mtu)?;
        Ok((conf, mode))
    }
}

/// The master's name and whether it is in the container: the configured one; else the
/// prevResult's single interface; else the host's default-route interface.
fn master_name(conf: &IpvlanConf, prev: Option<&CniResult>) -> Result<(String, bool), CniError> {
    if !conf.master.is_empty() {
        return Ok((conf.master.clone(), conf.link_in_container));
    }
    match prev {
        Some(prev) => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => {
                Ok((only.name.clone(), conf.link_in_container || !only.sandbox.is_empty()))
            }
            _ => Err(CniError::invalid_config(
                "master is not set and the prevResult does not name exactly one interface to use",
            )),
        },
        None => Ok((sublink::default_route_interface()?, conf.link_in_container)),
    }
}

pub struct Ipvlan;

impl Plugin for Ipvlan {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let (conf, mode) = IpvlanConf::load(req)?;
        let prev = req.prev_result()?;
        let addressing = match &prev {
            _ if delegate::has_ipam(req) => Addressing::Ipam,
            Some(prev) if !prev.ips.is_empty() => Addressing::PrevResult(prev),
            Some(_) => Addressing::None,
            None => {
                return Err(CniError::invalid_config(
                    "ipvlan needs an ipam section (ipam.type) unless chained after a plugin's prevResult",
                ))
            }
        };
        let (master_name, in_container) = master_name(&conf, prev.as_ref())?;
        let ns = open_container_netns(req)?;
        let mut master = sublink::master(&master_name, in_container, &ns)?;
        sublink::validate_mtu(conf.mtu, &master.link)?;
        sublink::attach(req, &ns, &mut master, conf.mtu, addressing, conf.dns.as_ref(), |nl, spec, parent| {
            nl.add_ipvlan(spec, parent, mode)
        })
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        crate::common::del_link_and_ipam(req, container_link::delete)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        IpvlanConf::load(req)?;
        let prev = req.require_prev_result()?;
        delegate::ipam_forward_if_configured(req)?;
        sublink::check(req, &prev, LinkKind::Ipvlan)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn about(&self) -> String {
        "ipvlan: an IPvlan link on a master device".into()
    }
}
