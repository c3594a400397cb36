//! `host-device`: moves an existing host interface into the container, renamed to
//! CNI_IFNAME, and back on DEL.
//!
//! As in the reference, the link's alias carries the original name while it is in the
//! container, so a reference plugin's DEL can move back what our ADD moved and vice
//! versa. What the alias cannot hold — the original alias, MTU and up/down state — is
//! kept in a small file per attachment under `dataDir`, so DEL puts the device back as
//! it found it. A PCI device bound to a userspace driver (vfio-pci etc.) has no netdev:
//! it is passed through in the result (`pciID`) and nothing is moved.

pub(crate) mod select;

use crate::common::addresses::{interface_with_mtu, Addresses, CONTAINER_IFACE};
use crate::common::rollback::{Rollback, Undo};
use crate::common::{iface, open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::{Link, NetNs, Netlink};
use cni_os::fs;
use cni_os::Idempotent;
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};
pub(crate) use select::{HostDeviceConf, Selector};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the device was on the host before ADD.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Saved {
    name: String,
    #[serde(default)]
    alias: String,
    mtu: u32,
    up: bool,
}

impl Saved {
    fn of(link: &Link) -> Saved {
        Saved {
            name: link.name.clone(),
            alias: link.alias.clone().unwrap_or_default(),
            mtu: link.mtu,
            up: link.up,
        }
    }
}

fn state_path(conf: &HostDeviceConf, req: &Request) -> PathBuf {
    conf.data_dir.join(&req.conf.name).join(format!("{}-{}", req.container_id, req.ifname))
}

/// The record is root's: written whole through `cni_os` (exclusive, link-free temporary
/// file, 0600) in a private directory, read without following a link.
fn write_state(path: &std::path::Path, saved: &Saved) -> Result<(), CniError> {
    let io = |e: std::io::Error| CniError::io(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().expect("state files live in a directory");
    fs::private_dir(dir).map_err(io)?;
    let bytes = serde_json::to_vec(saved).expect("plain struct");
    // Unsynced: it describes a device move, which a reboot undoes anyway.
    fs::write_atomic(path, &bytes, 0o600, fs::Durability::Unsynced).map_err(io)
}

/// A record is a few hundred bytes; anything far larger is not one of ours.
const MAX_RECORD: u64 = 64 * 1024;

fn read_state(path: &std::path::Path) -> Option<Saved> {
    let bytes = fs::read_nofollow_limited(path, MAX_RECORD).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// Removes an attachment's record; a directory found in its place (damage, never ours)
/// is cleared too (removed when empty, moved aside otherwise), so it blocks neither DEL
/// nor GC for good.
fn remove_state(path: &std::path::Path) -> Result<(), CniError> {
    let io = |e: std::io::Error| CniError::io(format!("cannot remove {}: {e}", path.display()));
    match fs::clear_dir_in_place(path).map_err(io)? {
        fs::Cleared::Nothing => {}
        cleared => eprintln!("host-device: {} was a directory, not a record: {cleared:?}", path.display()),
    }
    std::fs::remove_file(path).ignore_missing().map(drop).map_err(io)
}

/// Moves the container's `ifname` back to the host under its original name and restores
/// what `saved` says (without it, the name comes from the alias, as the reference does).
/// `Ok(false)` if there was nothing to move.
fn move_out(ns: &NetNs, ifname: &str, saved: Option<&Saved>) -> Result<bool, CniError> {
    let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
    let Some(link) = cont_nl.link_by_name(ifname).or_cni("look up container interface")? else {
        return Ok(false);
    };
    let name = match (saved, &link.alias) {
        (Some(saved), _) => saved.name.clone(),
        (None, Some(alias)) if !alias.is_empty() => alias.clone(),
        _ => {
            return Err(CniError::internal(format!(
                "cannot move {ifname} back: its original name is neither in its alias nor saved"
            )))
        }
    };
    let host = NetNs::current().or_cni("open the host namespace")?;
    cont_nl.move_link(link.index, &host, &name, saved.map(|s| s.alias.as_str())).map_err(|e| {
        CniError::internal(format!("failed to move {ifname} back to the host as {name}: {e}"))
    })?;
    if let Some(saved) = saved {
        restore_on_host(saved)?;
    }
    Ok(true)
}

/// Gives the device, back on the host under its saved name, its saved MTU and state.
/// Also run by a DEL that finds the device already out (an earlier DEL was killed
/// between the move and this); nothing to do if the device is not on the host.
fn restore_on_host(saved: &Saved) -> Result<(), CniError> {
    let mut host_nl = Netlink::new().or_cni("open netlink")?;
    let Some(back) = host_nl.link_by_name(&saved.name).or_cni("look up the device moved back")? else {
        return Ok(());
    };
    if back.mtu != saved.mtu {
        host_nl.set_link_mtu(back.index, saved.mtu).or_cni(&format!("restore the MTU of {}", saved.name))?;
    }
    if saved.up && !back.up {
        host_nl.set_link_up(back.index).or_cni(&format!("set {} up", saved.name))?;
    }
    Ok(())
}

/// The device while it is in the container: moved back out by its [`Rollback`] unless
/// kept.
struct MovedIn<'a> {
    ns: &'a NetNs,
    ifname: String,
    saved: Saved,
}

impl Undo for MovedIn<'_> {
    fn undo(&mut self) {
        if let Err(e) = move_out(self.ns, &self.ifname, Some(&self.saved)) {
            eprintln!("rollback: {e}");
        }
    }
}

/// Moves `device` into the container as `ifname`. If the rename there fails (the name is
/// taken), the device is brought back at once and the failure reported.
fn move_in<'a>(
    ns: &'a NetNs,
    device: &Link,
    ifname: &str,
) -> Result<(Rollback<MovedIn<'a>>, Link), CniError> {
    let saved = Saved::of(device);
    let mut host_nl = Netlink::new().or_cni("open netlink")?;
    let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
    let moved = host_nl.move_link(device.index, ns, ifname, Some(&device.name));
    if let Some(link) = cont_nl.link_by_name(ifname).or_cni("look up container interface")? {
        if link.alias.as_deref() == Some(device.name.as_str()) {
            return Ok((Rollback::new(MovedIn { ns, ifname: ifname.to_string(), saved }), link));
        }
    }
    // Not moved at all (still on the host), or moved under its own name but not renamed:
    // then it is the container's only link of that name, as names are unique there.
    let still_here = host_nl
        .link_by_index(device.index)
        .or_cni("look up the device")?
        .is_some_and(|l| l.name == device.name);
    if !still_here {
        move_out(ns, &device.name, Some(&saved))?;
    }
    Err(match moved {
        Err(e) if e.is_already_exists() => CniError::internal(format!(
            "failed to move {} in as {ifname:?}: the container already has an interface of that name",
            device.name
        )),
        Err(e) => CniError::internal(format!("failed to move {} into the container: {e}", device.name)),
        Ok(()) => CniError::internal(format!("{} did not arrive in the container as {ifname}", device.name)),
    })
}

pub struct HostDevice;

impl HostDevice {
    fn passthrough(&self, req: &Request, pci: &str, driver: &str) -> CniResult {
        eprintln!("host-device: {pci} is bound to {driver}: passed through without a netdev");
        CniResult {
            interfaces: vec![cni_types::Interface {
                name: req.ifname.clone(),
                sandbox: req.netns.clone(),
                pci_id: pci.to_string(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn add_attachment(
        &self,
        req: &Request,
        conf: &HostDeviceConf,
        selector: &Selector,
        ns: &NetNs,
    ) -> Result<CniResult, CniError> {
        let mut host_nl = Netlink::new().or_cni("open netlink")?;
        let device = select::find(&mut host_nl, selector)?;
        // IPAM first: a request it refuses is refused before any link changes (dropped, the
        // allocation is released; the link guard, made later, is undone first). An IPAM
        // plugin that works on the interface (slaac, dhcp) is asked once it is in place.
        let ipam_after_move = delegate::has_ipam(req) && delegate::ipam_needs_interface(req);
        let addresses = match ipam_after_move {
            true => Addresses::none(),
            false => Addresses::from_ipam_if_configured(req)?,
        };
        // The record goes down before the move: a runtime killed at any later moment
        // leaves a DEL that knows the MTU and state to restore (a record with nothing
        // moved is harmless: DEL finds no device in the container and removes it).
        let state = state_path(conf, req);
        write_state(&state, &Saved::of(&device))?;
        let (guard, link) = move_in(ns, &device, &req.ifname).inspect_err(|_| {
            let _ = remove_state(&state);
        })?;
        let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        iface::refuse_router_addresses(ns, req, &req.ifname, ipam_after_move || !addresses.is_empty())?;
        let addresses = match ipam_after_move {
            true => Addresses::from_ipam(req)?,
            false => addresses,
        };
        if addresses.is_empty() {
            cont_nl.set_link_up(link.index).or_cni(&format!("set {} up", req.ifname))?;
        } else {
            iface::configure(&mut cont_nl, &link, &addresses.result, CONTAINER_IFACE, false)?;
        }
        let now = cont_nl.require_link(&req.ifname).or_cni("look up the container interface")?;
        guard.keep();
        Ok(addresses.complete(interface_with_mtu(&now, &req.netns), conf.dns.as_ref()))
    }
}

impl Plugin for HostDevice {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let (conf, selector) = HostDeviceConf::load(req)?;
        let ns = open_container_netns(req)?;
        if let Selector::Pci(pci) = &selector {
            if let Some(driver) = select::pci_userspace_driver(pci) {
                return Ok(self.passthrough(req, pci, &driver));
            }
        }
        self.add_attachment(req, &conf, &selector, &ns)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let (conf, selector) = HostDeviceConf::load(req)?;
        if let Selector::Pci(pci) = &selector {
            if select::pci_userspace_driver(pci).is_some() {
                return Ok(());
            }
        }
        let state = state_path(&conf, req);
        let saved = read_state(&state);
        let moved = match open_container_netns_for_del(req)? {
            Some(ns) => move_out(&ns, &req.ifname, saved.as_ref())?,
            None => false,
        };
        if let (false, Some(saved)) = (moved, &saved) {
            restore_on_host(saved)?;
        }
        // Also without a namespace: the address must not leak with the container.
        delegate::ipam_forward_if_configured(req)?;
        remove_state(&state)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let (_conf, selector) = HostDeviceConf::load(req)?;
        delegate::ipam_forward_if_configured(req)?;
        let prev = req.require_prev_result()?;
        if let Selector::Pci(pci) = &selector {
            if select::pci_userspace_driver(pci).is_some() {
                return Ok(());
            }
        }
        let position = iface::prev_interface(&prev, req)?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let link = iface::check_link(&mut nl, &prev, position)?;
        if link.alias.as_deref().unwrap_or("").is_empty() {
            return Err(CniError::internal(format!(
                "container interface {} has no alias: its host name is lost",
                link.name
            )));
        }
        iface::check_addressing(&mut nl, &link, &prev, position)
    }

    /// Releases IPAM and forgets the saved state of attachments the runtime no longer has.
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf: HostDeviceConf = req.config()?;
        let ipam = delegate::ipam_forward_if_configured(req);
        let valid: std::collections::HashSet<String> =
            req.valid_attachments()?.iter().map(|a| format!("{}-{}", a.container_id, a.ifname)).collect();
        let dir = conf.data_dir.join(&req.conf.name);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !valid.contains(&name) {
                    remove_state(&entry.path())?;
                }
            }
        }
        ipam
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn about(&self) -> String {
        "host-device: moves a host interface into the container".into()
    }
}
