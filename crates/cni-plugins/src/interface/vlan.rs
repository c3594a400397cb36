//! `vlan`: an 802.1Q VLAN link on a `master` device, made in the container under
//! CNI_IFNAME, with the IPAM addresses. Containers on one VLAN of one layer-2 segment
//! talk; a different `vlanId` separates them.

use crate::common::container_link;
use crate::common::sublink::{self, Addressing};
use crate::common::{open_container_netns, NetResultExt};
use cni_net::netlink::{LinkKind, MAX_VLAN_ID};
use cni_net::Netlink;
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};
use cni_types::Dns;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VlanConf {
    #[serde(default)]
    master: String,
    /// Wider than a VLAN id so that out-of-range values get our message, not serde's.
    #[serde(default)]
    vlan_id: i64,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    link_in_container: bool,
    #[serde(default)]
    dns: Option<Dns>,
}

impl VlanConf {
    pub(crate) fn load(req: &Request) -> Result<VlanConf, CniError> {
        let conf: VlanConf = req.config()?;
        if conf.master.is_empty() {
            return Err(CniError::invalid_config(
                "master is required: the device (on the host, or in the container with linkInContainer) to put the VLAN on",
            ));
        }
        if !(0..=i64::from(MAX_VLAN_ID)).contains(&conf.vlan_id) {
            return Err(CniError::invalid_config(format!(
                "invalid vlanId {}: must be between 0 and {MAX_VLAN_ID}",
                conf.vlan_id
            )));
        }
        container_link::validate_mtu(conf.mtu)?;
        if !delegate::has_ipam(req) {
            return Err(CniError::invalid_config("vlan needs an ipam section: ipam.type is missing"));
        }
        Ok(conf)
    }

    fn vlan_id(&self) -> u16 {
        u16::try_from(self.vlan_id).expect("range checked in load")
    }
}

/// CHECK: the container's link carries the configured VLAN id (a link of the right name
/// and kind on another VLAN would pass every other check, yet reach other containers).
fn check_vlan_id(req: &Request, expected: u16) -> Result<(), CniError> {
    let ns = open_container_netns(req)?;
    let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
    let link = nl.require_link(&req.ifname).or_cni("look up the container interface")?;
    match nl.vlan_link_id(link.index).or_cni("read the VLAN id")? {
        Some(id) if id == expected => Ok(()),
        Some(id) => Err(CniError::internal(format!(
            "interface {} is on VLAN {id}, the configuration says vlanId {expected}",
            req.ifname
        ))),
        None => Err(CniError::internal(format!("interface {} reports no VLAN id", req.ifname))),
    }
}

pub struct Vlan;

impl Plugin for Vlan {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = VlanConf::load(req)?;
        let ns = open_container_netns(req)?;
        let mut master = sublink::master(&conf.master, conf.link_in_container, &ns)?;
        sublink::validate_mtu(conf.mtu, &master.link)?;
        let vlan_id = conf.vlan_id();
        sublink::attach(
            req,
            &ns,
            &mut master,
            conf.mtu,
            Addressing::Ipam,
            conf.dns.as_ref(),
            |nl, spec, parent| nl.add_vlan(spec, parent, vlan_id),
        )
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        crate::common::del_link_and_ipam(req, container_link::delete)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = VlanConf::load(req)?;
        let prev = req.require_prev_result()?;
        delegate::ipam_forward(req)?;
        sublink::check(req, &prev, LinkKind::Vlan)?;
        check_vlan_id(req, conf.vlan_id())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }

    fn about(&self) -> String {
        "vlan: an 802.1Q VLAN link on a master device".into()
    }
}
