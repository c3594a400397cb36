//! `tap`: a persistent tap device in the container's namespace, for a VM monitor (Kata,
//! QEMU) running there to attach to. Optionally a port of a bridge in the container.
//!
//! The tun driver makes a device in the namespace of the thread that opens
//! `/dev/net/tun`, so the tap is created by a short-lived thread that enters the container
//! (and, with `selinuxContext`, takes that label first so the device is labelled with it),
//! under a temporary name, then renamed to CNI_IFNAME like the reference does.

use crate::common::addresses::{interface_with_mtu, Addresses, CONTAINER_IFACE};
use crate::common::container_link::ContainerLink;
use crate::common::veth::free_staging_name;
use crate::common::{iface, open_container_netns, NetResultExt};
use cni_net::netlink::{LinkKind, TunSpec};
use cni_net::{Link, MacAddr, NetNs, Netlink};
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};
use cni_types::Dns;
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawConf {
    #[serde(default)]
    multi_queue: bool,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    owner: Option<u32>,
    #[serde(default)]
    group: Option<u32>,
    #[serde(default)]
    selinux_context: String,
    #[serde(default)]
    bridge: String,
    #[serde(default)]
    dns: Option<Dns>,
}

pub(crate) struct TapConf {
    raw: RawConf,
    mac: Option<MacAddr>,
}

impl TapConf {
    pub(crate) fn load(req: &Request) -> Result<TapConf, CniError> {
        let conf: RawConf = req.config()?;
        if conf.mtu != 0 && !(68..=65535).contains(&conf.mtu) {
            return Err(CniError::invalid_config(format!(
                "invalid mtu {}: must be between 68 and 65535",
                conf.mtu
            )));
        }
        let parse = |text: &str| {
            text.parse::<MacAddr>()
                .map_err(|_| CniError::invalid_config(format!("invalid MAC address {text:?} in mac")))
        };
        // Precedence as in the reference: config < CNI_ARGS MAC < runtimeConfig.mac.
        let mac = match cni_sdk::args::requested_mac(req)? {
            Some(m) => Some(parse(&m)?),
            None if !conf.mac.is_empty() => Some(parse(&conf.mac)?),
            None => None,
        };
        Ok(TapConf { raw: conf, mac })
    }
}

fn selinux_enabled() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
}

/// Creates the persistent tap `name` in `ns` from a thread of its own: the SELinux label,
/// if any, is the thread's alone and goes with it.
fn create_tap(ns: &NetNs, name: &str, conf: &RawConf) -> Result<(), CniError> {
    let spec = TunSpec {
        name: name.to_string(),
        kind: cni_net::netlink::TunType::Tap,
        multi_queue: conf.multi_queue,
        owner: conf.owner,
        group: conf.group,
    };
    let label = if conf.selinux_context.is_empty() {
        None
    } else if selinux_enabled() {
        Some(conf.selinux_context.as_str())
    } else {
        eprintln!("tap: SELinux is not enabled, selinuxContext {:?} ignored", conf.selinux_context);
        None
    };
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(label) = label {
                    std::fs::write("/proc/thread-self/attr/current", label).map_err(|e| {
                        CniError::internal(format!("failed to set SELinux context {label:?}: {e}"))
                    })?;
                }
                cni_net::netlink::create_tun(&spec, Some(ns))
                    .map_err(|e| CniError::internal(format!("failed to create tap: {e}")))
            })
            .join()
            .unwrap_or_else(|_| Err(CniError::internal("the thread creating the tap panicked")))
    })
}

fn find_bridge(nl: &mut Netlink, name: &str) -> Result<Link, CniError> {
    nl.link_by_name(name).or_cni("look up bridge")?.filter(|l| l.kind == LinkKind::Bridge).ok_or_else(|| {
        CniError::invalid_config(format!("failed to get bridge {name:?}: no such bridge in the container"))
    })
}

pub struct Tap;

impl Tap {
    fn add_attachment(&self, req: &Request, settings: &TapConf, ns: &NetNs) -> Result<CniResult, CniError> {
        let conf = &settings.raw;
        let mut nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        let bridge = if conf.bridge.is_empty() { None } else { Some(find_bridge(&mut nl, &conf.bridge)?) };
        // IPAM first: a request it refuses is refused before any link changes (dropped, the
        // allocation is released; the link guard, made later, is undone first).
        let addresses = Addresses::from_ipam_if_configured(req)?;
        // TUNSETIFF on an existing, detached tap would adopt it: the name must be new.
        let temp = free_staging_name(&mut nl, &req.ifname)?;
        create_tap(ns, &temp, conf)?;
        let link = nl.require_link(&temp).or_cni("look up the new tap")?;
        let guard = ContainerLink::guard(ns, link.clone());
        if conf.mtu > 0 {
            nl.set_link_mtu(link.index, conf.mtu as u32).or_cni("set tap mtu")?;
        }
        if let Some(mac) = settings.mac {
            nl.set_link_mac(link.index, mac).or_cni("set tap MAC")?;
        }
        match nl.set_link_name(link.index, &req.ifname) {
            Ok(()) => {}
            Err(e) if e.is_already_exists() => {
                return Err(CniError::internal(format!(
                    "failed to rename tap to {:?}: the container already has an interface of that name",
                    req.ifname
                )))
            }
            Err(e) => {
                return Err(CniError::internal(format!("failed to rename tap to {:?}: {e}", req.ifname)))
            }
        }
        if let Some(bridge) = &bridge {
            nl.set_link_master(link.index, bridge.index)
                .or_cni(&format!("failed to set tap {} as a port of bridge {}", req.ifname, bridge.name))?;
        }
        let announce = if addresses.is_empty() { iface::Announce::No } else { iface::Announce::Yes };
        iface::prepare_container_interface(ns, req, &req.ifname, !addresses.is_empty(), announce)?;
        if addresses.is_empty() {
            nl.set_link_up(link.index).or_cni(&format!("set {} up", req.ifname))?;
        } else {
            iface::configure(&mut nl, &link, &addresses.result, CONTAINER_IFACE, false)?;
        }
        let now = nl.require_link(&req.ifname).or_cni("look up the tap")?;
        guard.keep();
        Ok(addresses.complete(interface_with_mtu(&now, &req.netns), conf.dns.as_ref()))
    }
}

impl Plugin for Tap {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let settings = TapConf::load(req)?;
        let ns = open_container_netns(req)?;
        self.add_attachment(req, &settings, &ns)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        // As bridge and ptp do with the veth: out of service and renamed at once (the name
        // is free for a re-ADD), deleted by a helper that waits out the unregistration.
        crate::common::del_link_and_ipam(req, crate::common::veth::delete_container_end)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let settings = TapConf::load(req)?;
        delegate::ipam_forward_if_configured(req)?;
        let prev = req.require_prev_result()?;
        let position = iface::prev_interface(&prev, req)?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let link = iface::check_link(&mut nl, &prev, position)?;
        if link.kind != LinkKind::Tun {
            return Err(CniError::internal(format!("container interface {} is not a tap", link.name)));
        }
        if !settings.raw.bridge.is_empty() {
            let bridge = find_bridge(&mut nl, &settings.raw.bridge)?;
            if link.master != Some(bridge.index) {
                return Err(CniError::internal(format!(
                    "tap {} is not a port of bridge {}",
                    link.name, bridge.name
                )));
            }
        }
        iface::check_addressing(&mut nl, &link, &prev, position)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn about(&self) -> String {
        "tap: a persistent tap device in the container".into()
    }
}
