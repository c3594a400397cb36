//! A veth pair between the host and a container, created in one request with the peer made
//! directly inside the container's namespace (moving a device costs ~15 ms; creating it
//! there ~0.5 ms), and removed again by its guard if the ADD fails later.

use super::{random_bytes, NetResultExt};
use cni_net::netlink::{LinkSpec, VethSpec};
use cni_net::Idempotent;
use cni_net::{Link, MacAddr, NetNs, Netlink};
use cni_sdk::CniError;

/// The host end of a new pair. Dropping it without [`HostVeth::keep`] deletes the pair.
pub struct HostVeth {
    pub link: Link,
    armed: bool,
}

impl HostVeth {
    /// The ADD succeeded: the pair stays.
    pub fn keep(mut self) -> Link {
        self.armed = false;
        self.link.clone()
    }
}

impl Drop for HostVeth {
    fn drop(&mut self) {
        if self.armed {
            // Deleting one end deletes the pair. The guard runs on the host thread, so a
            // socket in the current namespace is the host's.
            if let Err(e) = Netlink::new().and_then(|mut nl| nl.delete_link(self.link.index)).ignore_missing()
            {
                eprintln!("rollback: cannot delete veth {}: {e}", self.link.name);
            }
        }
    }
}

/// What to create.
pub struct VethRequest<'a> {
    pub container_ns: &'a NetNs,
    pub container_ifname: &'a str,
    pub mtu: Option<u32>,
    pub container_mac: Option<MacAddr>,
}

/// Creates the pair; the host end gets a random `veth` + 8 hex name (retried on the rare
/// collision). Fails clearly when the container already has an interface of that name.
pub fn create_pair(
    host: &mut Netlink,
    container: &mut Netlink,
    req: &VethRequest<'_>,
) -> Result<(HostVeth, Link), CniError> {
    // No look-up first: a name taken in the container fails the creation (EEXIST), which
    // is told apart from a collision of our random host name below.
    let mut attempts = 0;
    let host_link = loop {
        let bytes: [u8; 4] = random_bytes()?;
        let host_name = format!("veth{:08x}", u32::from_be_bytes(bytes));
        let mut host_spec = LinkSpec::new(host_name.clone());
        let mut peer = LinkSpec::new(req.container_ifname).netns(req.container_ns);
        if let Some(mtu) = req.mtu {
            host_spec = host_spec.mtu(mtu);
            peer = peer.mtu(mtu);
        }
        if let Some(mac) = req.container_mac {
            peer = peer.mac(mac);
        }
        match host.add_veth(&VethSpec { link: host_spec, peer }) {
            Ok(Some(link)) => break link,
            Ok(None) => {
                return Err(CniError::internal("veth host end was not created in the host namespace"))
            }
            Err(e) if e.is_already_exists() && attempts < 8 => {
                // The container already has that name, or our random host name collided.
                if container
                    .link_by_name(req.container_ifname)
                    .or_cni("look up container interface")?
                    .is_some()
                {
                    return Err(CniError::internal(format!(
                        "container veth name provided ({}) already exists",
                        req.container_ifname
                    )));
                }
                attempts += 1;
            }
            Err(e) => return Err(CniError::internal(format!("failed to create veth pair: {e}"))),
        }
    };
    let guard = HostVeth { link: host_link, armed: true };
    // The host end faces the container: it must learn nothing from what the container sends.
    super::iface::refuse_router_advertisements(&guard.link.name)?;
    let container_link =
        container.require_link(req.container_ifname).or_cni("look up the new container interface")?;
    Ok((guard, container_link))
}

/// A link as a result interface (`sandbox` empty on the host).
pub fn result_interface(link: &Link, sandbox: &str) -> cni_types::Interface {
    cni_types::Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()).unwrap_or_default(),
        sandbox: sandbox.to_string(),
        ..Default::default()
    }
}

/// DEL's half in the container: deletes the container end (the host end goes with it).
/// A namespace or interface that is already gone is success.
///
/// The pair's unregistration makes the kernel wait for RCU callbacks (~20 ms of the
/// ~24 ms a bridge DEL used to take), so DEL only takes the interface out of service
/// here — down, which removes its routes and IPv6 addresses and drops the host end's
/// carrier, then renamed out of the way so the name is free for an immediate re-ADD
/// (`podman network reload` does DEL then ADD) — and leaves the deletion itself to a
/// detached helper process. The pair is gone a few tens of milliseconds after DEL returns.
///
/// The parking name is derived from the interface name, so that a DEL killed between the
/// rename and the deletion (`kill -9`, found by the kill9 suite) is finished by the
/// runtime's next DEL: it finds no `ifname` but the parked end, and deletes that. So is
/// an interface an ADD killed before it got its name left under its [`staging_name`].
pub fn delete_container_end(req: &cni_sdk::Request) -> Result<(), CniError> {
    let Some(ns) = super::open_container_netns_for_del(req)? else { return Ok(()) };
    let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
    let parking = parking_name(&req.ifname);
    let Some(link) = nl.link_by_name(&req.ifname).or_cni("look up container interface")? else {
        for leftover in [parking, staging_name(&req.ifname)] {
            if let Some(link) = nl.link_by_name(&leftover).or_cni("look up a leftover container interface")? {
                nl.delete_link_in_background(link.index).or_cni(&format!("delete {leftover}"))?;
            }
        }
        return Ok(());
    };
    let delete_now = |nl: &mut Netlink| {
        nl.delete_link(link.index)
            .ignore_missing()
            .map(drop)
            .map_err(|e| CniError::internal(format!("delete {}: {e}", req.ifname)))
    };
    let parked = nl.set_link_down(link.index).and_then(|()| nl.set_link_name(link.index, &parking));
    match parked {
        Ok(()) => nl.delete_link_in_background(link.index).or_cni(&format!("delete {}", req.ifname)),
        Err(e) if e.is_not_found() => Ok(()),
        // Whatever refused the rename (the end of an earlier DEL of this name still
        // parked, an old kernel), deleting still works.
        Err(_) => delete_now(&mut nl),
    }
}

/// The name a container end `ifname` awaits deletion under: recognisable, and the same
/// for the same `ifname`, so a later DEL can find it.
fn parking_name(ifname: &str) -> String {
    format!("cnidel{:08x}", name_hash(ifname))
}

/// The name a container interface `ifname` is made under before it is renamed to
/// `ifname` (so that a name taken in the container fails the rename, with a clear error,
/// not the creation). The same for the same `ifname`, so the DEL after a killed ADD finds
/// it.
pub fn staging_name(ifname: &str) -> String {
    format!("cniadd{:08x}", name_hash(ifname))
}

/// [`staging_name`] of `ifname`, free in the container: a link left under it by an
/// earlier ADD of `ifname` that was killed before renaming it is deleted first.
pub fn free_staging_name(container: &mut Netlink, ifname: &str) -> Result<String, CniError> {
    let name = staging_name(ifname);
    if let Some(stale) = container.link_by_name(&name).or_cni("look up the staging name")? {
        container.delete_link(stale.index).ignore_missing().or_cni(&format!("delete the stale {name}"))?;
    }
    Ok(name)
}

/// FNV-1a of an interface name: a short, stable name suffix.
fn name_hash(ifname: &str) -> u32 {
    ifname.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parking_names_are_stable_valid_link_names() {
        let name = super::parking_name("eth0");
        assert_eq!(name, super::parking_name("eth0"));
        assert_ne!(name, super::parking_name("eth1"));
        assert!(name.starts_with("cnidel") && name.len() == 14, "{name}");
        let staging = super::staging_name("eth0");
        assert_eq!(&staging[6..], &name[6..]);
        assert!(staging.starts_with("cniadd") && staging.len() <= 15, "{staging}");
    }
}
