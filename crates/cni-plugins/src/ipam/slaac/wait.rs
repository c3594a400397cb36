//! Waiting, bounded, for the kernel to autoconfigure a usable address from a router's
//! advertisement, soliciting one meanwhile.

use super::kernel_state::{self, State};
use super::sysctls::MAX_ADDRESSES;
use crate::common::NetResultExt;
use cni_net::netlink::IpFamily;
use cni_net::{Link, MacAddr, NetNs, Netlink};
use cni_sdk::{CniError, ErrorCode};
use ipnet::IpNet;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// RFC 4861's RTR_SOLICITATION_INTERVAL: how often a host may ask again.
const SOLICITATION_INTERVAL: Duration = Duration::from_secs(4);

/// How often the kernel's state is read: DAD alone takes a second, so a finer poll gains
/// nothing but netlink dumps.
const POLL: Duration = Duration::from_millis(50);

/// What the wait found.
#[derive(Debug)]
pub struct Autoconfigured {
    /// Usable autoconfigured addresses, in the kernel's order, at most [`MAX_ADDRESSES`].
    pub addresses: Vec<IpNet>,
    /// The default router, when an advertisement made one.
    pub router: Option<Ipv6Addr>,
}

/// Waits until `link` (MAC `mac`, in `ns`, read through `nl`) has a usable autoconfigured
/// address and none still in DAD (those would join the interface unreported), or until
/// `timeout`: then what is usable, or code 11 when nothing is.
pub fn for_address(
    ns: &NetNs,
    nl: &mut Netlink,
    link: &Link,
    mac: MacAddr,
    timeout: Duration,
) -> Result<Autoconfigured, CniError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut next_solicitation = start;
    loop {
        let addresses =
            nl.addresses(Some(link.index), Some(IpFamily::V6)).or_cni("list the container's addresses")?;
        let now = Instant::now();
        if now >= next_solicitation && kernel_state::has_link_local(&addresses) {
            // Best effort: without it the wait falls back on unsolicited advertisements.
            match ns.run(|| cni_net::announce::router_solicitation(link.index, mac)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("slaac: cannot solicit routers on {}: {e}", link.name),
                Err(e) => eprintln!("slaac: cannot enter the container to solicit routers: {e}"),
            }
            next_solicitation = now + SOLICITATION_INTERVAL;
        }
        let limit = MAX_ADDRESSES as usize;
        let usable = kernel_state::in_state(&addresses, State::Usable, limit);
        let pending = kernel_state::in_state(&addresses, State::Tentative, limit);
        if !usable.is_empty() && (pending.is_empty() || now >= deadline) {
            let routes = nl.routes(IpFamily::V6, None).or_cni("list the container's routes")?;
            return Ok(Autoconfigured {
                addresses: usable,
                router: kernel_state::default_router(&routes, link.index),
            });
        }
        if now >= deadline {
            return Err(nothing_usable(&link.name, timeout, &addresses));
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

/// Code 11: the network may yet get a router; the details say what the kernel did make.
fn nothing_usable(ifname: &str, timeout: Duration, addresses: &[cni_net::netlink::IpAddress]) -> CniError {
    let seen: Vec<String> = addresses
        .iter()
        .filter(|a| kernel_state::is_autoconfigured(a))
        .take(MAX_ADDRESSES as usize)
        .map(|a| format!("{} ({:?})", a.address, kernel_state::state(a)))
        .collect();
    let details = if seen.is_empty() {
        "no address was autoconfigured".to_string()
    } else {
        format!("autoconfigured but not usable: {}", seen.join(", "))
    };
    CniError::new(
        ErrorCode::TryAgainLater,
        format!(
            "slaac: no router advertised a usable prefix on {ifname} within {:.1}s (ipam.timeout)",
            timeout.as_secs_f64()
        ),
    )
    .with_details(details)
}
