//! `dummy`: a dummy link in the container carrying the IPAM addresses — an address the
//! container owns without any connectivity behind it.

use crate::common::addresses::{Addresses, CONTAINER_IFACE};
use crate::common::container_link::{self, ContainerLink};
use crate::common::iface;
use crate::common::veth::result_interface;
use crate::common::{open_container_netns, NetResultExt};
use cni_net::netlink::LinkSpec;
use cni_net::{NetNs, Netlink};
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};

fn require_ipam(req: &Request) -> Result<(), CniError> {
    if !delegate::has_ipam(req) {
        return Err(CniError::invalid_config("dummy needs an ipam section: ipam.type is missing"));
    }
    Ok(())
}

pub struct Dummy;

impl Dummy {
    fn add_attachment(&self, req: &Request, ns: &NetNs) -> Result<CniResult, CniError> {
        let mut nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        let link = match nl.add_dummy(&LinkSpec::new(req.ifname.as_str())) {
            Ok(Some(link)) => link,
            Ok(None) => return Err(CniError::internal("the dummy link was not created in the container")),
            Err(e) if e.is_already_exists() => {
                return Err(CniError::internal(format!(
                    "interface {} already exists in the container",
                    req.ifname
                )))
            }
            Err(e) => {
                return Err(CniError::internal(format!("failed to create dummy link {}: {e}", req.ifname)))
            }
        };
        let link = ContainerLink::guard(ns, link);
        let addresses = Addresses::from_ipam(req)?;
        iface::configure(&mut nl, &link.link, &addresses.result, CONTAINER_IFACE, false)?;
        let now = nl.link_by_index(link.link.index).or_cni("look up the dummy link")?;
        let interface = result_interface(now.as_ref().unwrap_or(&link.link), &req.netns);
        link.keep();
        Ok(addresses.complete(interface, None))
    }
}

impl Plugin for Dummy {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        require_ipam(req)?;
        let ns = open_container_netns(req)?;
        self.add_attachment(req, &ns)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        crate::common::del_link_and_ipam(req, container_link::delete)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        require_ipam(req)?;
        let prev = req.require_prev_result()?;
        delegate::ipam_forward(req)?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let link = iface::check_link(&mut nl, &prev, CONTAINER_IFACE)?;
        if link.kind != cni_net::netlink::LinkKind::Dummy {
            return Err(CniError::internal(format!("{} is a {:?} link, not dummy", link.name, link.kind)));
        }
        iface::check_addressing(&mut nl, &link, &prev, CONTAINER_IFACE)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward(req)
    }

    fn about(&self) -> String {
        "dummy: a dummy link in the container with IPAM addresses".into()
    }
}
