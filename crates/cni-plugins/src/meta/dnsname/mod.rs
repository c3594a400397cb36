//! `dnsname`: container name resolution on a network, a drop-in for the reference meta
//! plugin podman adds to networks made with DNS enabled, without dnsmasq.
//!
//! Chained after `bridge`, ADD writes the attachment's record (its name, aliases and
//! addresses) atomically into the state directory and has the `cni-dnsd` resolver reload
//! (starting it when it is not running); when ADD returns, the names are served. The result
//! gets the gateway addresses as nameservers and the domain as search domain. DEL removes
//! exactly this attachment's record (other containers sharing a name or alias keep theirs),
//! GC the records of attachments not in the valid list, and the network's directory goes
//! with its last attachment. CHECK asks the resolver what it serves for the name; STATUS
//! asks the resolver how it is.
//!
//! The plugin itself stays small (no async runtime, no DNS wire code): all it does is write
//! files and send one line to the resolver's control socket.

pub(crate) mod config;
mod redirect;
mod resolver;

use cni_dns::{NetworkRecord, StateDir};
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::ErrorCode;
use config::DnsnameConf;

fn store_error(e: cni_dns::StoreError) -> CniError {
    CniError::io(format!("dnsname: {e}"))
}

/// Reload, and fail if the resolver reports trouble with this network's addresses.
fn reload(req: &Request, state: &StateDir) -> Result<String, CniError> {
    resolver::ask(req, state, "reload")
}

/// The configuration checks of ADD, without touching the state directory (for the fuzzer).
pub fn config_stage(req: &Request) -> Result<(), CniError> {
    let conf = config::load(req)?;
    config::aliases(req, &conf).map(drop)
}

pub struct Dnsname;

impl Dnsname {
    fn register(&self, req: &Request, conf: &DnsnameConf, state: &StateDir) -> Result<CniResult, CniError> {
        let prev = req.prev_result()?.ok_or_else(|| {
            CniError::invalid_config("dnsname: must be called as a chained plugin (no prevResult)")
        })?;
        let host = config::host_record(req, conf, &prev)?;
        let gateways = config::gateways(&prev)?;
        let bridge = config::bridge(&prev)?;
        {
            // DEL removes a network's directory with its last record: not while we add one.
            let _lock = resolver::StateLock::acquire_prepared(state)?;
            state.prepare_network(&conf.network).map_err(store_error)?;
            let network = NetworkRecord {
                domain: conf.domain.clone(),
                listen: gateways.clone(),
                upstreams: conf.upstreams.clone(),
                port: conf.bind_port,
                subnets: config::subnets(&prev),
                interface: Some(bridge.clone()),
            };
            state.write_network(&conf.network, &network).map_err(store_error)?;
            state.write_host(&conf.network, &host).map_err(store_error)?;
        }
        let redirected = match conf.bind_port {
            53 => Ok(()),
            port => redirect::install(&conf.network, &bridge, &gateways, port),
        };
        if let Err(e) = redirected.and_then(|()| reload(req, state).map(drop)) {
            // Roll back: the record must not linger for a container that never started.
            let _ = self.unregister(conf, state, &req.container_id, &req.ifname);
            return Err(e);
        }
        let mut result = prev;
        let mut nameservers: Vec<String> = gateways.iter().map(|g| g.to_string()).collect();
        nameservers.retain(|n| !result.dns.nameservers.contains(n));
        nameservers.append(&mut result.dns.nameservers);
        result.dns.nameservers = nameservers;
        if !result.dns.search.contains(&conf.domain) {
            result.dns.search.push(conf.domain.clone());
        }
        Ok(result)
    }

    /// Removes one attachment's record (and the network's directory after its last one).
    fn unregister(
        &self,
        conf: &DnsnameConf,
        state: &StateDir,
        container_id: &str,
        ifname: &str,
    ) -> Result<(), CniError> {
        if !state.network_dir(&conf.network).exists() {
            // Nothing on disk; a DEL killed between removing the records and the redirect
            // may have left the redirect.
            return self.unredirect(conf);
        }
        let _lock = resolver::StateLock::acquire(state, "state.lock")?;
        state.remove_host(&conf.network, container_id, ifname).map_err(store_error)?;
        if state.remove_network_if_empty(&conf.network).map_err(store_error)? {
            self.unredirect(conf)?;
        }
        Ok(())
    }

    fn unredirect(&self, conf: &DnsnameConf) -> Result<(), CniError> {
        match conf.bind_port {
            53 => Ok(()),
            _ => redirect::remove(&conf.network),
        }
    }
}

impl Plugin for Dnsname {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = config::load(req)?;
        let state = StateDir::new(&conf.state_dir);
        self.register(req, &conf, &state)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let state = StateDir::new(&conf.state_dir);
        self.unregister(&conf, &state, &req.container_id, &req.ifname)?;
        // A running resolver drops the names now; one that is not running reads the disk
        // when it starts, and the record is gone from there already.
        resolver::ask_if_running(&state, "reload")?;
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let state = StateDir::new(&conf.state_dir);
        let prev = req.require_prev_result()?;
        let want = config::host_record(req, &conf, &prev)?;
        let have = state.read_host(&conf.network, &req.container_id, &req.ifname).map_err(store_error)?;
        if have.as_ref() != Some(&want) {
            return Err(CniError::new(
                ErrorCode::Internal,
                format!(
                    "dnsname: the record of {} on {} is {}",
                    req.container_id,
                    conf.network,
                    match have {
                        None => "missing".to_string(),
                        Some(h) => format!("different from what ADD wrote: {h:?}"),
                    }
                ),
            ));
        }
        for name in std::iter::once(&want.name).chain(&want.aliases) {
            let fqdn = format!("{name}.{}", conf.domain);
            let served = resolver::ask(req, &state, &format!("lookup {} {fqdn}", conf.network))?;
            let served: Vec<&str> = served.split_whitespace().collect();
            for address in &want.addresses {
                if !served.contains(&address.to_string().as_str()) {
                    return Err(CniError::new(
                        ErrorCode::Internal,
                        format!("dnsname: the resolver does not answer {address} for {fqdn}"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let state = StateDir::new(&conf.state_dir);
        let valid = req.valid_attachments()?;
        if !state.network_dir(&conf.network).exists() {
            return Ok(());
        }
        let mut removed = 0;
        {
            let _lock = resolver::StateLock::acquire(&state, "state.lock")?;
            let hosts = state.hosts(&conf.network, cni_dns::MAX_HOSTS_PER_NETWORK).map_err(store_error)?;
            for host in hosts.into_iter().flatten() {
                if !valid.iter().any(|a| a.container_id == host.container_id && a.ifname == host.ifname) {
                    state
                        .remove_host(&conf.network, &host.container_id, &host.ifname)
                        .map_err(store_error)?;
                    removed += 1;
                }
            }
            if state.remove_network_if_empty(&conf.network).map_err(store_error)? {
                self.unredirect(&conf)?;
            }
        }
        if removed > 0 {
            resolver::ask_if_running(&state, "reload")?;
        }
        Ok(())
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let conf = config::load(req)?;
        let state = StateDir::new(&conf.state_dir);
        let status = resolver::ask(req, &state, "status")?;
        if let Some(problem) = cni_dns::control::listen_error(&status) {
            return Err(CniError::new(ErrorCode::NotAvailable, format!("dnsname: the resolver: {problem}")));
        }
        Ok(())
    }

    fn about(&self) -> String {
        "dnsname: container names served by cni-dnsd on the network's gateway".into()
    }
}
