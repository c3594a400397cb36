//! `firewall`: accepts forwarded traffic to and from the container's addresses and,
//! with `ingressPolicy`, isolates bridges from each other (`same-bridge`) and containers
//! from their bridge siblings (`isolated`).
//!
//! A chained plugin: it needs prevResult on ADD and CHECK and passes it through
//! unchanged. Backends: `nftables` (default; our own tables over netlink, see
//! [`nftables`]), `iptables` (the reference's chains through `iptables-restore`, see
//! [`iptables`]) and `firewalld` (the addresses bound to a firewalld zone over D-Bus, see
//! [`firewalld`]; also chosen, as the reference does, when no backend is given and
//! firewalld runs).
//!
//! On a host whose iptables-nft FORWARD chain drops (Docker's), every backend also admits
//! the attachment's traffic there, and only its traffic (see [`admission`]).
//!
//! Policy semantics follow the reference's rules rather than its one-line summary:
//! `same-bridge` drops traffic between two bridges that both have a non-open policy
//! (traffic from the host's other interfaces, e.g. published ports, still flows);
//! `isolated` adds that containers on the same bridge cannot reach each other.

pub mod admission;
pub mod config;
pub mod firewalld;
pub mod iptables;
pub mod nftables;
pub mod target;

use cni_net::nft::NftClient;
use cni_sdk::{Attachment, CniError, CniResult, ErrorCode, GcErrors, Plugin, Request, Version, VersionInfo};
use config::{Backend, IngressPolicy};
use target::Target;

use crate::common::rollback::{Rollback, Undo};

/// An admission made by this ADD, taken back if the backend's part fails.
struct Admitted {
    network: String,
    who: Attachment,
}

impl Undo for Admitted {
    fn undo(&mut self) {
        let undone =
            nftables::client().and_then(|mut nft| admission::del(&mut nft, &self.network, &self.who));
        if let Err(e) = undone {
            eprintln!("firewall: rolling back the admission of {}: {}", self.who.container_id, e.msg);
        }
    }
}

/// Admits the attachment where another firewall's FORWARD chain would drop it.
fn admit(nft: &mut NftClient, req: &Request, target: &Target) -> Result<Rollback<Admitted>, CniError> {
    for tables in admission::legacy_filter_tables() {
        eprintln!(
            "firewall: this namespace has an {tables}-legacy filter table; its FORWARD chain is not examined, \
             and if it drops, container {} gets no forwarded traffic until rules there accept it",
            req.container_id
        );
    }
    let (network, who) = (req.conf.name.clone(), req.attachment());
    admission::add(nft, &network, &who, &target.ips)?;
    Ok(Rollback::new(Admitted { network, who }))
}

pub struct Firewall;

impl Plugin for Firewall {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = config::load(req)?;
        let prev = req.require_prev_result()?;
        let target = Target::from_result(&prev);
        // One nftables client for the whole ADD (see `del`).
        let mut nft = nftables::client()?;
        let admitted = admit(&mut nft, req, &target)?;
        if let Some(fw) = firewalld::select(&conf)? {
            firewalld::add(&fw, req, &conf, &target)?;
            // The policy is ours to enforce whatever the backend (the reference's too).
            if conf.ingress_policy != IngressPolicy::Open {
                if let Err(e) = nftables::add(&mut nft, req, conf.ingress_policy, &target) {
                    // Only what this ADD recorded: not an address someone else had bound.
                    if let Err(undo) = firewalld::del(req, &conf, None) {
                        eprintln!("firewall: rollback: {}", undo.msg);
                    }
                    return Err(e);
                }
            }
            admitted.keep();
            return Ok(prev);
        }
        match conf.backend {
            Backend::Nftables | Backend::Firewalld => {
                nftables::add(&mut nft, req, conf.ingress_policy, &target)?
            }
            Backend::Iptables => iptables::add(&conf, &target)?,
        }
        admitted.keep();
        Ok(prev)
    }

    /// Idempotent, and works without a namespace or prevResult (nftables finds the
    /// container's state by its own tag; iptables rules can only be found by address).
    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        // An unreadable prevResult must not make DEL fail forever: treat it as absent.
        let target = req.prev_result().ok().flatten().map(|prev| Target::from_result(&prev));
        // The sources ADD bound in firewalld (when it was the backend, or may have been).
        let firewalld = firewalld::del(req, &conf, target.as_ref());
        // One nftables client for the whole DEL, and the deleting commit before anything
        // else: releasing a socket flushes the kernel's pending destruction of earlier
        // commits (the previous DEL's, usually) while holding the commit mutex, so a
        // second socket released before our commit made that commit wait a grace period.
        let mut nft = nftables::client()?;
        let backend = match conf.backend {
            Backend::Firewalld if conf.ingress_policy == IngressPolicy::Open => firewalld,
            Backend::Firewalld => firewalld.and(nftables::del(&mut nft, req, target.as_ref())),
            // The reference's iptables rules for these addresses go too: a node swapped
            // from the reference (whose firewall defaults to iptables) has them for the
            // containers it started. Both parts run; the first failure is returned.
            Backend::Nftables => {
                let ours = nftables::del(&mut nft, req, target.as_ref());
                let reference = iptables::del(&mut nft, target.as_ref());
                firewalld.and(ours).and(reference)
            }
            // Without prevResult (a runtime that lost its result cache) the iptables rules
            // could only leak: the container's interface, still there while the chain is
            // torn down in reverse, still has the addresses they were made for.
            Backend::Iptables => firewalld
                .and(iptables::del(&mut nft, target.or_else(|| Target::from_container(req)).as_ref())),
        };
        backend.and(admission::del(&mut nft, &req.conf.name, &req.attachment()))
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let target = Target::from_result(&req.require_prev_result()?);
        if let Some(fw) = firewalld::select(&conf)? {
            firewalld::check(&fw, &conf, &target)?;
            if conf.ingress_policy != IngressPolicy::Open {
                nftables::check(req, conf.ingress_policy, &target)?;
            }
        } else {
            match conf.backend {
                Backend::Nftables | Backend::Firewalld => nftables::check(req, conf.ingress_policy, &target)?,
                Backend::Iptables => iptables::check(&conf, &target)?,
            }
        }
        admission::check(&mut *nftables::client()?, &req.conf.name, &req.attachment(), &target.ips)
    }

    /// nftables: removes the chains and elements of attachments the runtime no longer
    /// lists. iptables: the reference's rules carry no owner, so there is nothing GC could
    /// attribute; it leaves them (DEL with prevResult removes them). firewalld: the
    /// sources ADD recorded for attachments no longer listed (whatever the backend now:
    /// the records say what is ours). Either way the admissions of attachments no longer
    /// listed go.
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let firewalld = firewalld::gc(req, &conf.data_dir);
        let backend = match conf.backend {
            Backend::Nftables | Backend::Firewalld => firewalld.and(nftables::gc(req)),
            Backend::Iptables => firewalld,
        };
        let mut errors = GcErrors::new();
        match nftables::client() {
            Ok(mut nft) => errors.merge(admission::gc(&mut nft, &req.conf.name, &req.valid_attachments()?)),
            Err(e) => errors.push("admission chains", e),
        }
        backend.and(errors.into_result().map_err(|e| e.to_cni_error()))
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        if firewalld::select(&conf).map_err(|e| CniError::new(ErrorCode::NotAvailable, e.msg))?.is_some() {
            return Ok(());
        }
        match conf.backend {
            Backend::Nftables | Backend::Firewalld => nftables::status(),
            Backend::Iptables => iptables::status(),
        }
    }

    /// 0.4.0 and later, as the reference: CHECK, and the prevResult that DEL needs to find
    /// the iptables rules, do not exist before 0.4.0.
    fn version_info(&self) -> VersionInfo {
        VersionInfo::since(Version::V0_4_0)
    }

    fn about(&self) -> String {
        "firewall: accepts forwarded container traffic and isolates bridges (nftables, iptables or firewalld)"
            .into()
    }
}
