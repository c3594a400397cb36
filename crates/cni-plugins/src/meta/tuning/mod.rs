//! `tuning`: changes sysctls and attributes (MAC, MTU, promiscuous and all-multicast
//! mode, transmit queue length) of the container's interface, and puts them back on DEL.
//!
//! A chained plugin: it passes `prevResult` through (with the interface's new MAC).
//! Everything is validated before the kernel is touched; the values it replaces are
//! recorded (see [`state`]) before the first change, and a failure halfway rolls back
//! what was already changed.

pub mod config;
mod link_state;
pub mod state;

use crate::common::{open_container_netns, open_container_netns_for_del, NetResultExt};
use cni_net::{NetNs, Netlink};
use cni_sdk::{CniError, CniResult, GcErrors, Plugin, Request};
use config::TuningConf;
use state::Owner;

pub struct Tuning;

/// The result reports the interface as tuning left it.
fn update_result(result: &mut CniResult, ifname: &str, conf: &TuningConf) {
    for iface in result.interfaces.iter_mut().filter(|i| i.name == ifname) {
        if let Some(mac) = conf.mac {
            iface.mac = mac.to_string();
        }
        if let (Some(mtu), Some(reported)) = (conf.mtu, iface.mtu.as_mut()) {
            *reported = mtu;
        }
    }
}

fn record_path(req: &Request, data_dir: &std::path::Path) -> std::path::PathBuf {
    state::record_path(data_dir, &req.container_id, &req.ifname)
}

impl Tuning {
    /// Records the originals, then applies. `need_link`: fail before any change when the
    /// interface is missing even if only sysctls are to be set.
    fn tune(
        req: &Request,
        ns: &NetNs,
        nl: &mut Netlink,
        conf: &TuningConf,
        need_link: bool,
    ) -> Result<(), CniError> {
        let link = if conf.changes_link() || need_link {
            Some(link_state::container_link(nl, &req.ifname)?)
        } else {
            None
        };
        let mut originals = link_state::read_originals(ns, link.as_ref(), conf)?;
        let path = record_path(req, &conf.data_dir);
        let older = state::load(&path)?;
        let had_record = older.is_some();
        if let Some(older) = older {
            originals.merge_older(older);
        }
        if !originals.is_empty() {
            originals.owner = Some(Owner {
                network: req.conf.name.clone(),
                container_id: req.container_id.clone(),
                ifname: req.ifname.clone(),
            });
            // Written before the first change: a crash halfway still leaves a record.
            state::store(&path, &originals)?;
        }
        if let Err(e) = link_state::apply(ns, nl, &req.ifname, link.as_ref(), conf, &originals) {
            if !had_record {
                let _ = state::remove(&path);
            }
            return Err(e);
        }
        Ok(())
    }
}

impl Plugin for Tuning {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = config::load(req)?;
        let prev = req.chained_prev_result()?;
        let ns = open_container_netns(req)?;
        let prev = match prev {
            // Nothing to tune (podman's default chain ends with such a tuning): the
            // namespace is checked above, no record is needed, the result passes through.
            Some(mut result) if conf.sysctls.is_empty() && !conf.changes_link() => {
                update_result(&mut result, &req.ifname, &conf);
                return Ok(result);
            }
            prev => prev,
        };
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        Self::tune(req, &ns, &mut nl, &conf, prev.is_none())?;
        let mut result = match prev {
            Some(prev) => prev,
            None => {
                let link = link_state::container_link(&mut nl, &req.ifname)?;
                crate::common::iface::result_from_link(&mut nl, &link, &req.netns)?
            }
        };
        update_result(&mut result, &req.ifname, &conf);
        Ok(result)
    }

    /// Restores what ADD recorded. No record, no namespace, no interface: nothing to do.
    fn del(&self, req: &Request) -> Result<(), CniError> {
        let data_dir = config::data_dir(req)?;
        if let Err(e) = state::require_trusted_dir(&data_dir) {
            // Nothing in it can be told from a plant: restore nothing, touch nothing, and
            // succeed (a retry could not do better).
            eprintln!("tuning: not restoring anything from {}: {e}", data_dir.display());
            return Ok(());
        }
        let path = record_path(req, &data_dir);
        let Some(record) = state::load(&path)? else {
            // Absent, or damaged beyond use: a damaged one goes, so it neither lingers nor
            // blocks the next ADD.
            state::remove_damaged(&path);
            return Ok(());
        };
        if let Some(ns) = open_container_netns_for_del(req)? {
            let errors = link_state::restore(&ns, &req.ifname, &record);
            if !errors.is_empty() {
                // The record stays, so a retried DEL can finish the job.
                return Err(CniError::internal(format!("tuning: {}", errors.join("; "))));
            }
        }
        state::remove(&path)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        req.require_prev_result()?;
        let ns = open_container_netns(req)?;
        let mut nl = Netlink::in_ns(&ns).or_cni("open netlink in the container")?;
        link_state::check(&ns, &mut nl, &req.ifname, &conf)
    }

    /// Drops records of this network's attachments the runtime no longer has (their
    /// namespaces are gone, so there is nothing left to restore), and the temporary files
    /// of writes whose plugin was killed before it renamed them.
    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let valid = req.valid_attachments()?;
        let mut errors = GcErrors::new();
        let data_dir = config::data_dir(req)?;
        let swept = cni_os::fs::remove_abandoned_temp_files(&data_dir).map(drop);
        let swept = swept.map_err(|e| CniError::io(format!("tuning: cannot remove temporary files: {e}")));
        errors.record(format!("temporary files in {}", data_dir.display()), swept);
        for (path, record) in state::list(&data_dir)? {
            let Some(owner) = record.owner else { continue };
            let in_use =
                valid.iter().any(|a| a.container_id == owner.container_id && a.ifname == owner.ifname);
            if owner.network == req.conf.name && !in_use {
                errors.record(format!("record {}", path.display()), state::remove(&path));
            }
        }
        Ok(errors.into_result()?)
    }

    fn about(&self) -> String {
        "tuning: sets sysctls and interface attributes in the container, restored on DEL".into()
    }
}
