//! A link a plugin makes for the container itself (dummy, vlan, ipvlan, macvlan, tap) rather
//! than a veth pair: removed again by its guard if the ADD fails later, and by name on DEL.

use super::{open_container_netns_for_del, NetResultExt};
use cni_net::Idempotent;
use cni_net::{Link, NetNs, Netlink};
use cni_sdk::{CniError, Request};

/// A new link in the container's namespace. Dropping it without [`ContainerLink::keep`]
/// deletes it, so an ADD failing after creation leaves nothing behind.
pub struct ContainerLink<'a> {
    ns: &'a NetNs,
    pub link: Link,
    armed: bool,
}

impl<'a> ContainerLink<'a> {
    /// Guards `link`, which lives in `ns`.
    pub fn guard(ns: &'a NetNs, link: Link) -> ContainerLink<'a> {
        ContainerLink { ns, link, armed: true }
    }

    /// The ADD succeeded: the link stays.
    pub fn keep(mut self) -> Link {
        self.armed = false;
        self.link.clone()
    }
}

impl Drop for ContainerLink<'_> {
    fn drop(&mut self) {
        if self.armed {
            let deleted = Netlink::in_ns(self.ns).and_then(|mut nl| nl.delete_link(self.link.index));
            if let Err(e) = deleted.ignore_missing() {
                eprintln!("rollback: cannot delete {}: {e}", self.link.name);
            }
        }
    }
}

/// DEL: removes CNI_IFNAME from the container. No namespace or no such link is success
/// (DEL is idempotent and may come after the container is gone).
pub fn delete(req: &Request) -> Result<(), CniError> {
    let Some(ns) = open_container_netns_for_del(req)? else { return Ok(()) };
    let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
    let Some(link) = nl.link_by_name(&req.ifname).or_cni("look up the container interface")? else {
        return Ok(());
    };
    nl.delete_link(link.index)
        .ignore_missing()
        .map(drop)
        .map_err(|e| CniError::internal(format!("delete {}: {e}", req.ifname)))
}

/// The `mtu` key: 0 means the kernel's default; otherwise within what Ethernet allows.
pub fn validate_mtu(mtu: u32) -> Result<(), CniError> {
    if mtu != 0 && !(68..=65535).contains(&mtu) {
        return Err(CniError::invalid_config(format!("invalid mtu {mtu}: must be between 68 and 65535")));
    }
    Ok(())
}

/// The `master` device, looked up through `nl`; a missing one is a configuration error
/// (code 7) that names the key, not an internal one.
pub fn find_master(nl: &mut Netlink, name: &str, where_: &str) -> Result<Link, CniError> {
    // A name no link can have ('/', NUL, too long) is a configuration error, not a failed
    // lookup.
    cni_types::validate::validate_interface_name_field("master", name)?;
    nl.link_by_name(name)
        .or_cni(&format!("look up master {name:?}"))?
        .ok_or_else(|| CniError::invalid_config(format!("master: link {name:?} not found {where_}")))
}
