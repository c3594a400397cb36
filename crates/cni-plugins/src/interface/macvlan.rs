//! `macvlan`: the container gets a macvlan of a host interface (its "master"), with its own
//! MAC on the master's segment.
//!
//! The link is created under a temporary name straight into the container's namespace
//! (its parent stays on the host), then renamed to CNI_IFNAME there, so a name taken in
//! the container never clashes with a host interface. With `linkInContainer` the master
//! is an interface of the container's namespace and everything happens there.

use crate::common::addresses::{Addresses, CONTAINER_IFACE};
use crate::common::container_link::ContainerLink;
use crate::common::veth::free_staging_name;
use crate::common::{iface, open_container_netns, NetResultExt};
use cni_net::netlink::{IpFamily, LinkKind, LinkSpec, MacvlanMode, MacvlanSpec, MAIN_TABLE};
use cni_net::{Link, MacAddr, NetNs, Netlink};
use cni_sdk::{delegate, CniError, CniResult, Plugin, Request};
use cni_types::Dns;
use serde::Deserialize;
use std::net::IpAddr;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawConf {
    #[serde(default)]
    master: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    mtu: i64,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    link_in_container: bool,
    #[serde(default, rename = "bcqueuelen")]
    bc_queue_len: u32,
    #[serde(default)]
    dns: Option<Dns>,
}

/// What the configuration asks for, validated.
pub(crate) struct MacvlanConf {
    raw: RawConf,
    mode: MacvlanMode,
    mac: Option<MacAddr>,
}

fn parse_mode(mode: &str) -> Result<MacvlanMode, CniError> {
    match mode {
        "" => Ok(MacvlanMode::Bridge),
        // Source mode needs a list of allowed source MACs the reference configures through
        // a key of its own; refused rather than created half-configured.
        "source" => Err(CniError::unsupported_field("mode", "source")),
        other => other.parse().map_err(|_| {
            CniError::invalid_config(format!(
                "invalid mode {other:?}: expected bridge, private, vepa or passthru"
            ))
        }),
    }
}

fn parse_mac(field: &str, text: &str) -> Result<MacAddr, CniError> {
    text.parse().map_err(|_| CniError::invalid_config(format!("invalid MAC address {text:?} in {field}")))
}

impl MacvlanConf {
    pub(crate) fn load(req: &Request) -> Result<MacvlanConf, CniError> {
        let conf: RawConf = req.config()?;
        let mode = parse_mode(&conf.mode)?;
        if conf.mtu < 0 {
            return Err(CniError::invalid_config(format!("invalid mtu {}: must not be negative", conf.mtu)));
        }
        // Precedence as in the reference: config < CNI_ARGS MAC < args.cni < runtimeConfig.
        let mac = match cni_sdk::args::requested_mac(req)? {
            Some(m) => Some(parse_mac("mac", &m)?),
            None if !conf.mac.is_empty() => Some(parse_mac("mac", &conf.mac)?),
            None => None,
        };
        Ok(MacvlanConf { raw: conf, mode, mac })
    }
}

/// The interface of the namespace's first default route (IPv4 first), as the reference
/// picks a master when none is configured.
fn default_route_interface(nl: &mut Netlink) -> Result<Option<String>, CniError> {
    for family in [IpFamily::V4, IpFamily::V6] {
        let routes = nl.routes(family, Some(MAIN_TABLE)).or_cni("list routes")?;
        if let Some(oif) = routes.iter().filter(|r| r.is_default()).find_map(|r| r.oif) {
            if let Some(link) = nl.link_by_index(oif).or_cni("look up the default route's interface")? {
                return Ok(Some(link.name));
            }
        }
    }
    Ok(None)
}

/// The master link, configured or defaulted; missing is a configuration error (code 7).
fn find_master(nl: &mut Netlink, conf: &RawConf) -> Result<Link, CniError> {
    let name = if conf.master.is_empty() {
        default_route_interface(nl)?.ok_or_else(|| {
            CniError::invalid_config(
                "master is not set and there is no default route to take its interface from",
            )
        })?
    } else {
        conf.master.clone()
    };
    nl.link_by_name(&name)
        .map_err(|e| CniError::invalid_config(format!("failed to lookup master {name:?}: {e}")))?
        .ok_or_else(|| {
            CniError::invalid_config(format!("failed to lookup master {name:?}: no such interface"))
        })
}

/// Announces the container's new IPv4/IPv6 addresses on the segment (best effort, as the
/// reference: a peer that misses it still learns the MAC by asking), and, like the
/// reference, has the kernel announce them again whenever the link comes up or its MAC
/// changes (`arp_notify`, `ndisc_notify`). Those alone announce nothing here: the link
/// came up before it had addresses.
fn announce(ns: &NetNs, link: &Link, result: &CniResult) {
    let Some(mac) = link.mac else { return };
    let addrs: Vec<IpAddr> = result.ips_of(Some(CONTAINER_IFACE)).map(|ip| ip.address.addr()).collect();
    let sent = ns.run(|| {
        for key in [
            format!("net.ipv4.conf.{}.arp_notify", link.name),
            format!("net.ipv6.conf.{}.ndisc_notify", link.name),
        ] {
            if let Err(e) = cni_net::sysctl::write(&key, "1") {
                eprintln!("macvlan: cannot set {key}: {e}");
            }
        }
        for addr in addrs {
            let outcome = match addr {
                IpAddr::V4(v4) => cni_net::announce::gratuitous_arp_v4(link.index, mac, v4),
                IpAddr::V6(v6) => cni_net::announce::unsolicited_na_v6(link.index, mac, v6),
            };
            if let Err(e) = outcome {
                eprintln!("macvlan: cannot announce {addr} on {}: {e}", link.name);
            }
        }
    });
    if let Err(e) = sent {
        eprintln!("macvlan: cannot enter the container to announce addresses: {e}");
    }
}

fn result_interface(link: &Link, sandbox: &str) -> cni_types::Interface {
    cni_types::Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()).unwrap_or_default(),
        mtu: Some(link.mtu),
        sandbox: sandbox.to_string(),
        ..Default::default()
    }
}

pub struct Macvlan;

impl Macvlan {
    /// Creates the macvlan under the staging name of `ifname` in the container; returns
    /// its guard and the link.
    fn create<'a>(
        &self,
        ifname: &str,
        settings: &MacvlanConf,
        master_nl: &mut Netlink,
        cont_nl: &mut Netlink,
        ns: &'a NetNs,
    ) -> Result<ContainerLink<'a>, CniError> {
        let conf = &settings.raw;
        let master = find_master(master_nl, conf)?;
        if conf.mtu > i64::from(master.mtu) {
            return Err(CniError::invalid_config(format!(
                "invalid MTU {}, must be [0, master MTU({})]",
                conf.mtu, master.mtu
            )));
        }
        let temp = free_staging_name(cont_nl, ifname)?;
        let mut link = LinkSpec::new(temp.clone());
        if conf.mtu > 0 {
            link = link.mtu(conf.mtu as u32);
        }
        if let Some(mac) = settings.mac {
            link = link.mac(mac);
        }
        if !conf.link_in_container {
            link = link.netns(ns);
        }
        let spec = MacvlanSpec {
            link,
            parent_index: master.index,
            mode: settings.mode,
            bc_queue_len: (conf.bc_queue_len > 0).then_some(conf.bc_queue_len),
        };
        master_nl
            .add_macvlan(&spec)
            .map_err(|e| CniError::internal(format!("failed to create macvlan on {}: {e}", master.name)))?;
        let link = cont_nl.require_link(&temp).or_cni("look up the new macvlan")?;
        Ok(ContainerLink::guard(ns, link))
    }

    fn add_attachment(
        &self,
        req: &Request,
        settings: &MacvlanConf,
        ns: &NetNs,
    ) -> Result<CniResult, CniError> {
        let mut cont_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
        let guard = if settings.raw.link_in_container {
            let mut master_nl = Netlink::in_ns(ns).or_cni("open netlink in the container")?;
            self.create(&req.ifname, settings, &mut master_nl, &mut cont_nl, ns)?
        } else {
            let mut host_nl = Netlink::new().or_cni("open netlink")?;
            self.create(&req.ifname, settings, &mut host_nl, &mut cont_nl, ns)?
        };
        match cont_nl.set_link_name(guard.link.index, &req.ifname) {
            Ok(()) => {}
            Err(e) if e.is_already_exists() => {
                return Err(CniError::internal(format!(
                    "failed to rename macvlan to {:?}: the container already has an interface of that name",
                    req.ifname
                )))
            }
            Err(e) => {
                return Err(CniError::internal(format!("failed to rename macvlan to {:?}: {e}", req.ifname)))
            }
        }
        let link = cont_nl.require_link(&req.ifname).or_cni("look up the container macvlan")?;
        iface::refuse_router_addresses(ns, req, &link.name, delegate::has_ipam(req))?;

        let addresses = Addresses::from_ipam_if_configured(req)?;
        if addresses.is_empty() {
            // Layer 2 only: up, without addresses.
            cont_nl.set_link_up(link.index).or_cni(&format!("set {} up", link.name))?;
        } else {
            iface::configure(&mut cont_nl, &link, &addresses.result, CONTAINER_IFACE, false)?;
            announce(ns, &link, &addresses.result);
        }
        guard.keep();
        Ok(addresses.complete(result_interface(&link, &req.netns), settings.raw.dns.as_ref()))
    }
}

impl Plugin for Macvlan {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let settings = MacvlanConf::load(req)?;
        let ns = open_container_netns(req)?;
        self.add_attachment(req, &settings, &ns)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        // As bridge and ptp do with the veth: out of service and renamed at once (the name
        // is free for a re-ADD), deleted by a helper that waits out the unregistration.
        crate::common::del_link_and_ipam(req, crate::common::veth::delete_container_end)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let settings = MacvlanConf::load(req)?;
        let prev = req.require_prev_result()?;
        delegate::ipam_forward_if_configured(req)?;
        let ns = open_container_netns(req)?;
        let mut cont_nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        let master = if settings.raw.link_in_container {
            find_master(&mut cont_nl, &settings.raw)?
        } else {
            find_master(&mut Netlink::new().or_cni("open netlink")?, &settings.raw)?
        };
        let position = iface::prev_interface(&prev, req)?;
        let link = iface::check_link(&mut cont_nl, &prev, position)?;
        if link.kind != LinkKind::Macvlan {
            return Err(CniError::internal(format!(
                "container interface {} is not of type macvlan",
                link.name
            )));
        }
        let mode = cont_nl.macvlan_mode(link.index).or_cni("read macvlan mode")?;
        if mode != Some(settings.mode) {
            let shown = mode.map(|m| m.to_string()).unwrap_or_else(|| "unknown".into());
            return Err(CniError::internal(format!(
                "container macvlan mode {shown} does not match expected value: {}",
                settings.mode
            )));
        }
        // The parent is the master, in the host's namespace unless linkInContainer.
        let parent_elsewhere = link.link_netnsid.is_some();
        if link.link != Some(master.index) || parent_elsewhere == settings.raw.link_in_container {
            return Err(CniError::internal(format!(
                "container macvlan {} is not on master {}",
                link.name, master.name
            )));
        }
        iface::check_addressing(&mut cont_nl, &link, &prev, position)
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        delegate::ipam_forward_if_configured(req)
    }

    fn about(&self) -> String {
        "macvlan: gives the container a macvlan of a host interface".into()
    }
}
