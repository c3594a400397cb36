//! Persistent TUN/TAP devices.
//!
//! These cannot be created over rtnetlink: the tun driver makes a device when a
//! `/dev/net/tun` fd is attached with `TUNSETIFF`, and `TUNSETPERSIST` keeps it after the fd
//! is closed. The device is created in the namespace of the thread that opened
//! `/dev/net/tun`, so for another namespace the whole sequence runs inside [`NetNs::run`].
//! Delete it like any link, with [`super::Netlink::delete_link`].

use std::fs::{File, OpenOptions};

use cni_os::tun;

use crate::error::{Error, Result};
use crate::netlink::link::validate_link_name;
use crate::netns::NetNs;

/// Layer 3 (tun) or layer 2 (tap).
pub use cni_os::tun::Kind as TunType;

/// A persistent TUN/TAP device to create.
#[derive(Debug, Clone)]
pub struct TunSpec {
    pub name: String,
    pub kind: TunType,
    /// Allow several queues (fds) to be attached later.
    pub multi_queue: bool,
    /// User allowed to attach to the device.
    pub owner: Option<u32>,
    /// Group allowed to attach to the device.
    pub group: Option<u32>,
}

impl TunSpec {
    /// A single-queue tap named `name`, usable by root only.
    pub fn tap(name: impl Into<String>) -> TunSpec {
        TunSpec { name: name.into(), kind: TunType::Tap, multi_queue: false, owner: None, group: None }
    }
}

/// Creates a persistent TUN/TAP device in `ns` (or the calling thread's namespace).
pub fn create_tun(spec: &TunSpec, ns: Option<&NetNs>) -> Result<()> {
    validate_link_name(&spec.name)?;
    match ns {
        Some(ns) => ns.run(|| create_here(spec))?,
        None => create_here(spec),
    }
}

/// Opens a queue of the existing device `spec.name` in the calling thread's namespace, as
/// a VM monitor does: the returned file reads and writes the device's frames. A
/// single-queue device takes one queue; `multi_queue` ones as many as are opened.
pub fn attach_tun(spec: &TunSpec) -> Result<File> {
    validate_link_name(&spec.name)?;
    open_queue(spec)
}

/// `/dev/net/tun` attached to `spec.name` with `TUNSETIFF` (which makes the device if
/// there is none of that name).
fn open_queue(spec: &TunSpec) -> Result<File> {
    let device = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|source| Error::Tun { op: "open /dev/net/tun for", name: spec.name.clone(), source })?;
    tun::attach(&device, &spec.name, spec.kind, spec.multi_queue).map_err(|source| Error::Tun {
        op: "attach",
        name: spec.name.clone(),
        source,
    })?;
    Ok(device)
}

fn create_here(spec: &TunSpec) -> Result<()> {
    let fail = |op: &'static str| move |source| Error::Tun { op, name: spec.name.clone(), source };
    let device = open_queue(spec)?;
    if let Some(owner) = spec.owner {
        tun::set_owner(&device, owner).map_err(fail("set owner of"))?;
    }
    if let Some(group) = spec.group {
        tun::set_group(&device, group).map_err(fail("set group of"))?;
    }
    tun::set_persistent(&device).map_err(fail("make persistent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_name_is_refused() {
        assert!(create_tun(&TunSpec::tap("bad/name"), None).is_err());
    }
}
