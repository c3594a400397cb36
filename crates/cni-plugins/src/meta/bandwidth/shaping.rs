//! The tc state bandwidth puts on the host, and how it is checked and removed.
//!
//! Ingress (towards the container) is shaped by a `tbf` root qdisc, handle `1:`, on the
//! host end of the container's veth: what the host sends into the veth is what the
//! container receives. Egress (from the container) arrives on the host end as received
//! traffic, which a qdisc cannot delay, so a `u32` match-all filter on the veth's ingress
//! hook redirects it (`mirred egress redirect`) to an IFB device whose root `tbf` shapes it.
//!
//! Living with other tc users of the host veth:
//! - root qdisc: one the kernel attached by itself (`noqueue`, default `fq_codel`, ...,
//!   handle `0:`) or our own `tbf 1:` is replaced; any other root qdisc belongs to someone
//!   else, and ADD fails naming it rather than silently taking its place.
//! - ingress hook: an existing `ingress` or `clsact` qdisc is shared; our filter goes in at
//!   its own priority ([`REDIRECT_PRIORITY`]). Filters of others at that priority make ADD
//!   fail, and DEL only removes that priority when every filter in it is ours.

use crate::common::rollback::{Rollback, Undo};
use crate::common::NetResultExt;
use cni_net::netlink::tc::{QdiscKind, QdiscSpec, RedirectFilter, TbfParams, TcHandle};
use cni_net::netlink::LinkKind;
use cni_net::Idempotent;
use cni_net::{Link, Netlink};
use cni_sdk::CniError;
use std::time::Duration;

use super::config::Limit;

/// The handle of the `tbf` qdiscs bandwidth creates (on the veth and on the IFB).
pub const TBF_HANDLE: TcHandle = TcHandle::new(1, 0);
/// The priority of the redirect filter on the host veth's ingress hook. Not 1: an
/// existing `clsact` user is likely to have filters at the lowest priorities.
pub const REDIRECT_PRIORITY: u16 = 0x0bd0;
/// How long a packet may wait in the bucket's queue, as the reference (25 ms).
pub const LATENCY: Duration = Duration::from_millis(25);

/// The tbf parameters for a configured limit.
pub fn tbf_params(limit: &Limit) -> Result<TbfParams, CniError> {
    TbfParams::shaping(limit.rate_bits, limit.burst_bits, LATENCY)
        .map_err(|e| CniError::invalid_config(format!("bandwidth: {e}")))
}

/// What to delete if the ADD fails later: a device, its root qdisc, its ingress qdisc,
/// its redirect filter.
enum UndoStep {
    Link(u32),
    RootQdisc(u32),
    IngressQdisc(u32),
    Filters(u32),
}

/// What an ADD did so far, taken back in reverse order through [`Rollback`] unless the ADD
/// keeps it. It runs on the host thread, so a socket opened in the current namespace is
/// the host's.
#[derive(Default)]
pub struct Shaping {
    steps: Vec<UndoStep>,
}

impl Undo for Shaping {
    fn undo(&mut self) {
        if self.steps.is_empty() {
            return;
        }
        let mut nl = match Netlink::new() {
            Ok(nl) => nl,
            Err(e) => return eprintln!("bandwidth rollback: cannot open netlink: {e}"),
        };
        while let Some(step) = self.steps.pop() {
            let outcome = match step {
                UndoStep::Link(index) => nl.delete_link(index),
                UndoStep::RootQdisc(index) => nl.delete_qdisc(index, TcHandle::ROOT, TcHandle::UNSPEC),
                UndoStep::IngressQdisc(index) => {
                    nl.delete_qdisc(index, TcHandle::INGRESS, TcHandle::INGRESS_QDISC)
                }
                UndoStep::Filters(index) => {
                    nl.delete_filters(index, TcHandle::INGRESS_HOOK, REDIRECT_PRIORITY)
                }
            };
            if let Err(e) = outcome.ignore_missing() {
                eprintln!("bandwidth rollback: {e}");
            }
        }
    }
}

/// Puts a shaping `tbf` at the root of `link`, if the root is free for it (see the module
/// comment).
pub fn install_root_tbf(
    nl: &mut Netlink,
    link: &Link,
    params: TbfParams,
    rollback: &mut Rollback<Shaping>,
) -> Result<(), CniError> {
    let spec = QdiscSpec::tbf_root(link.index, TBF_HANDLE, params);
    match nl.root_qdisc(link.index).or_cni(&format!("list qdiscs of {}", link.name))? {
        Some(root) if matches!(root.kind, QdiscKind::Tbf(_)) && root.handle == TBF_HANDLE => {
            nl.replace_qdisc(&spec).or_cni(&format!("replace tbf qdisc on {}", link.name))?;
        }
        Some(root) if !root.is_kernel_default() => {
            return Err(CniError::internal(format!(
                "bandwidth: {} already has a root qdisc {} {} that bandwidth did not create; \
                 refusing to replace it",
                link.name,
                root.kind_name(),
                root.handle
            )));
        }
        _ => nl.add_qdisc(&spec).or_cni(&format!("add tbf qdisc on {}", link.name))?,
    }
    rollback.steps.push(UndoStep::RootQdisc(link.index));
    Ok(())
}

/// Redirects everything `veth` receives to `ifb`, sharing an existing ingress hook.
pub fn install_redirect(
    nl: &mut Netlink,
    veth: &Link,
    ifb: &Link,
    rollback: &mut Rollback<Shaping>,
) -> Result<(), CniError> {
    if nl.ingress_hook_qdisc(veth.index).or_cni(&format!("list qdiscs of {}", veth.name))?.is_none() {
        nl.add_qdisc(&QdiscSpec::ingress(veth.index))
            .or_cni(&format!("add ingress qdisc on {}", veth.name))?;
        rollback.steps.push(UndoStep::IngressQdisc(veth.index));
    }
    let taken = nl
        .filters(veth.index, TcHandle::INGRESS_HOOK)
        .or_cni(&format!("list ingress filters of {}", veth.name))?
        .into_iter()
        .any(|f| f.priority == REDIRECT_PRIORITY);
    if taken {
        return Err(CniError::internal(format!(
            "bandwidth: {} already has ingress filters at priority {REDIRECT_PRIORITY}",
            veth.name
        )));
    }
    let filter = RedirectFilter {
        index: veth.index,
        parent: TcHandle::INGRESS_HOOK,
        priority: REDIRECT_PRIORITY,
        target_index: ifb.index,
    };
    nl.add_redirect_filter(&filter).or_cni(&format!("redirect {} to {}", veth.name, ifb.name))?;
    rollback.steps.push(UndoStep::Filters(veth.index));
    Ok(())
}

/// Records a device made by ADD, to be deleted if ADD fails later.
pub fn created_link(rollback: &mut Rollback<Shaping>, link: &Link) {
    rollback.steps.push(UndoStep::Link(link.index));
}

/// DEL on a host veth that is still there: removes our redirect filter (only when the
/// whole priority is ours), an `ingress` qdisc left without filters, and our root `tbf`.
pub fn remove_from_veth(nl: &mut Netlink, veth: &Link, ifb_index: Option<u32>) -> Result<(), CniError> {
    let what = |op: &str| format!("{op} on {}", veth.name);
    let filters = nl.filters(veth.index, TcHandle::INGRESS_HOOK).or_cni(&what("list ingress filters"))?;
    let at_our_priority: Vec<_> = filters.iter().filter(|f| f.priority == REDIRECT_PRIORITY).collect();
    // A u32 filter is listed with its hash table entries, which carry no action. Ours
    // redirect to our IFB or, once it is gone, to an index that names no device any more.
    let mut all_ours = true;
    for filter in &at_our_priority {
        let ours = filter.kind == "u32"
            && match filter.redirect_to {
                None => true,
                Some(to) if ifb_index == Some(to) => true,
                Some(to) => {
                    ifb_index.is_none() && nl.link_by_index(to).or_cni(&what("look up link"))?.is_none()
                }
            };
        all_ours &= ours;
    }
    if !at_our_priority.is_empty() && all_ours {
        ignore_missing_tc(nl.delete_filters(veth.index, TcHandle::INGRESS_HOOK, REDIRECT_PRIORITY))
            .or_cni(&what("delete redirect filter"))?;
        let hook = nl.ingress_hook_qdisc(veth.index).or_cni(&what("list qdiscs"))?;
        let others_left =
            !nl.filters(veth.index, TcHandle::INGRESS_HOOK).or_cni(&what("list filters"))?.is_empty();
        if hook.is_some_and(|q| q.kind == QdiscKind::Ingress) && !others_left {
            ignore_missing_tc(nl.delete_qdisc(veth.index, TcHandle::INGRESS, TcHandle::INGRESS_QDISC))
                .or_cni(&what("delete ingress qdisc"))?;
        }
    }
    if let Some(root) = nl.root_qdisc(veth.index).or_cni(&what("list qdiscs"))? {
        if matches!(root.kind, QdiscKind::Tbf(_)) && root.handle == TBF_HANDLE {
            ignore_missing_tc(nl.delete_qdisc(veth.index, TcHandle::ROOT, TcHandle::UNSPEC))
                .or_cni(&what("delete tbf qdisc"))?;
        }
    }
    Ok(())
}

/// [`Idempotent::ignore_missing`], and EINVAL too: tc answers the removal of a filter or
/// qdisc that is not there with EINVAL as well as ENOENT.
fn ignore_missing_tc(result: cni_net::Result<()>) -> cni_net::Result<()> {
    match result.ignore_missing() {
        Err(e) if e.errno() == Some(libc::EINVAL) => Ok(()),
        other => other.map(drop),
    }
}

/// CHECK: the root of `link` is our `tbf` with exactly `expected`.
pub fn check_root_tbf(nl: &mut Netlink, link: &Link, expected: TbfParams) -> Result<(), CniError> {
    let root = nl.root_qdisc(link.index).or_cni(&format!("list qdiscs of {}", link.name))?;
    match root {
        Some(root) if root.kind == QdiscKind::Tbf(expected) => Ok(()),
        Some(root) => match root.kind {
            QdiscKind::Tbf(actual) => Err(CniError::internal(format!(
                "bandwidth: tbf on {} has rate {} B/s, buffer {}, limit {}; expected rate {} B/s, buffer {}, \
                 limit {}",
                link.name, actual.rate, actual.buffer, actual.limit, expected.rate, expected.buffer, expected.limit
            ))),
            _ => Err(CniError::internal(format!(
                "bandwidth: {} has root qdisc {} {}, expected tbf {TBF_HANDLE}",
                link.name,
                root.kind_name(),
                root.handle
            ))),
        },
        None => Err(CniError::internal(format!("bandwidth: {} has no tbf qdisc", link.name))),
    }
}

/// CHECK: `veth` redirects what it receives to `ifb`.
pub fn check_redirect(nl: &mut Netlink, veth: &Link, ifb: &Link) -> Result<(), CniError> {
    let filters =
        nl.filters(veth.index, TcHandle::INGRESS_HOOK).or_cni(&format!("list filters of {}", veth.name))?;
    if filters.iter().any(|f| f.priority == REDIRECT_PRIORITY && f.redirect_to == Some(ifb.index)) {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "bandwidth: {} does not redirect its ingress to {}",
            veth.name, ifb.name
        )))
    }
}

/// Whether `link` is an IFB device.
pub fn is_ifb(link: &Link) -> bool {
    link.kind == LinkKind::Ifb
}
