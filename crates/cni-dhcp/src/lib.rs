//! `dhcp` IPAM: addresses leased from DHCPv4 and DHCPv6 servers by a long-running daemon.
//!
//! A plugin process lives for milliseconds, a lease for hours: so, as in the reference,
//! `dhcp daemon` holds the leases (acquires them inside the container's
//! namespace, renews at T1, rebinds at T2, releases on DEL, persists them so a restart
//! resumes renewing), and the `dhcp` plugin only asks it over a unix socket.
//!
//! - [`wire`], [`options`]: the DHCPv4 message and option codecs; [`wire6`]: DHCPv6's;
//! - [`lease`]: what an ACK grants and the CNI result made from it; [`lease6`]: a REPLY;
//! - [`client`], [`client6`]: the exchanges with a server, from a socket inside the
//!   container;
//! - [`store`]: leases on disk; [`daemon`]: keeping them; [`cli`]: the binary's command
//!   line (the daemon's flags);
//!   [`metrics`]: what the daemon counts;
//! - [`protocol`]: plugin <-> daemon messages; [`config`]: the plugin's configuration;
//!   [`Dhcp`] below: the IPAM plugin itself, every verb a request to the daemon.

//!
//! A crate and a binary (`dhcp`) of their own, not a plugin of the multi-call
//! `cni-plugins`: the DHCP codecs, the daemon and its command line would otherwise be
//! mapped by every plugin exec of every node. The daemon is the binary's `daemon`
//! sub-command, as the reference's is and as etcd-ipam's agent is `etcd-ipam agent`: one
//! binary per model, whose plugin and daemon always agree on the protocol between them.

pub mod cli;
pub mod client;
pub mod client6;
pub mod config;
pub mod daemon;
pub mod lease;
pub mod lease6;
pub mod metrics;
pub mod options;
pub mod protocol;
pub mod store;
pub mod wire;
pub mod wire6;

use std::io;
use std::time::Duration;

use cni_sdk::catalog::Entry;
use cni_sdk::keys::config_keys;
use cni_sdk::{CniError, CniResult, Plugin, Request};
use cni_types::ErrorCode;

use config::{key, load, params, params6};
use lease::Leased;
use protocol::{Op, Response, ValidAttachment};
use store::Family;

/// The plugin's name: its `type` in a configuration and its binary's.
pub const NAME: &str = "dhcp";

/// dhcp's record for the catalog `cnitool validate`, the fuzzer and the docs drift test
/// read: its dry stage is the parsing and validation before it asks the daemon anything.
pub fn catalog() -> &'static [Entry] {
    &[Entry {
        name: NAME,
        make: || Box::new(Dhcp),
        config_stage: |req| load(req).and_then(|(conf, _)| params(req, &conf)).map(drop),
        keys: config_keys::<config::RawConf>,
        chained: false,
    }]
}

/// How long the plugin waits for the daemon: more than an acquisition may take with the
/// daemon's default timeout and retransmissions.
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// Sends `op`; a daemon that is not there is `unreachable`'s code (11 for the verbs that
/// change leases, 50 for STATUS), a refusal is the daemon's own CNI error.
fn call(
    req: &Request,
    socket: &std::path::Path,
    op: Op,
    unreachable: ErrorCode,
) -> Result<Response, CniError> {
    let trace = req.trace.as_ref().map(|t| t.trace_id());
    let response = protocol::call(socket, op, trace, CALL_TIMEOUT).map_err(|e| {
        let absent = matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused);
        if absent {
            CniError::new(
                unreachable,
                format!(
                    "dhcp: daemon not running (no one at {}), start it with `dhcp daemon`",
                    socket.display()
                ),
            )
        } else {
            CniError::new(unreachable, format!("dhcp: talking to the daemon at {}: {e}", socket.display()))
        }
    })?;
    if response.ok {
        Ok(response)
    } else {
        let code = if response.code == 0 { ErrorCode::Internal as u32 } else { response.code };
        Err(CniError::new(code, response.msg))
    }
}

/// The lease in the daemon's answer to an ADD of `family` (a daemon too old to know the
/// family would answer with a v4 lease: refused, not passed on as v6).
fn lease_of(response: Response, family: Family) -> Result<Leased, CniError> {
    let lease =
        response.lease.ok_or_else(|| CniError::internal("dhcp: the daemon answered ADD without a lease"))?;
    match (&lease, family) {
        (Leased::V4(_), Family::V4) | (Leased::V6(_), Family::V6) => Ok(lease),
        _ => Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            "dhcp: the daemon answered with a lease of the other address family (a daemon without DHCPv6?)",
        )),
    }
}

/// One result from an attachment's leases: their addresses (IPv4 first), routes, and DNS
/// servers and search domains of both (the domain is DHCPv4's: DHCPv6 has none).
fn result_of(leases: &[Leased]) -> CniResult {
    let mut result =
        CniResult { interfaces: Vec::new(), ips: Vec::new(), routes: Vec::new(), dns: Default::default() };
    for lease in leases {
        result.ips.push(lease.ip_config());
        result.routes.extend(lease.routes());
        let dns = lease.dns();
        if result.dns.domain.is_empty() {
            result.dns.domain = dns.domain;
        }
        result.dns.nameservers.extend(dns.nameservers);
        for name in dns.search {
            if !result.dns.search.contains(&name) {
                result.dns.search.push(name);
            }
        }
    }
    result
}

/// The `dhcp` IPAM plugin (configuration: [`config`]).
pub struct Dhcp;

impl Plugin for Dhcp {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let (conf, socket) = load(req)?;
        // Every key is checked before the daemon is asked for anything.
        let mut wanted = Vec::new();
        for family in conf.families()? {
            let params = match family {
                Family::V4 => params(req, &conf)?,
                Family::V6 => params6(req, &conf)?,
            };
            wanted.push((family, params));
        }
        let netns = req
            .netns_path()
            .ok_or_else(|| CniError::new(ErrorCode::InvalidEnvironment, "dhcp: CNI_NETNS is required"))?;
        let mut leases = Vec::new();
        for (family, params) in wanted {
            let op = Op::Add { key: key(req), netns: netns.to_string(), params, family };
            let lease = call(req, &socket, op, ErrorCode::TryAgainLater).and_then(|r| lease_of(r, family));
            match lease {
                Ok(lease) => leases.push(lease),
                Err(e) => {
                    // All or nothing: the first family's lease goes back, and so does the
                    // lease of the wrong family an older daemon may have taken.
                    let wrong_family = e.code == ErrorCode::IncompatibleVersion as u32;
                    if !leases.is_empty() || wrong_family {
                        let _ = call(req, &socket, Op::Del { key: key(req) }, ErrorCode::TryAgainLater);
                    }
                    return Err(e);
                }
            }
        }
        Ok(result_of(&leases))
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let (_, socket) = load(req)?;
        call(req, &socket, Op::Del { key: key(req) }, ErrorCode::TryAgainLater).map(drop)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let (conf, socket) = load(req)?;
        for family in conf.families()? {
            let response = call(req, &socket, Op::Check { key: key(req), family }, ErrorCode::TryAgainLater)?;
            if let (Some(lease), Ok(Some(prev))) = (&response.lease, req.prev_result()) {
                let addr = lease.address().addr();
                if !prev.ips.iter().any(|ip| ip.address.addr() == addr) {
                    return Err(CniError::internal(format!(
                        "dhcp: the lease is for {addr}, which is not in the result of {}",
                        req.ifname
                    )));
                }
            }
        }
        Ok(())
    }

    fn gc(&self, req: &Request) -> Result<(), CniError> {
        let (_, socket) = load(req)?;
        let valid = req
            .valid_attachments()?
            .into_iter()
            .map(|a| ValidAttachment { container_id: a.container_id, ifname: a.ifname })
            .collect();
        call(req, &socket, Op::Gc { network: req.conf.name.clone(), valid }, ErrorCode::TryAgainLater)
            .map(drop)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        let (_, socket) = load(req)?;
        call(req, &socket, Op::Status, ErrorCode::NotAvailable).map(drop)
    }

    fn about(&self) -> String {
        "dhcp IPAM (cni-rs): leases from a DHCP server, kept by `dhcp daemon`".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_dual_stack_result_puts_ipv4_first_and_merges_dns() {
        let v4: Leased = serde_json::from_value(json!({
            "address": "10.1.0.5/24", "server_id": "10.1.0.1", "routers": ["10.1.0.1"],
            "dns_servers": ["10.1.0.53"], "domain": "example.org", "search": ["a.example"],
            "lease_secs": 60, "renew_secs": 30, "rebind_secs": 52, "acquired_unix": 1000
        }))
        .unwrap();
        let v6: Leased = serde_json::from_value(json!({
            "address": "fd00::5/64", "server_duid": [0, 3, 0, 1], "iaid": 7,
            "dns_servers": ["fd00::53"], "search": ["a.example", "b.example"],
            "preferred_secs": 50, "lease_secs": 60, "renew_secs": 25, "rebind_secs": 40, "acquired_unix": 1000
        }))
        .unwrap();
        assert!(matches!((&v4, &v6), (Leased::V4(_), Leased::V6(_))), "each reads as its family");
        let result = result_of(&[v4.clone(), v6.clone()]);
        let ips: Vec<(String, Option<std::net::IpAddr>)> =
            result.ips.iter().map(|ip| (ip.address.to_string(), ip.gateway)).collect();
        assert_eq!(
            ips,
            [
                ("10.1.0.5/24".to_string(), Some("10.1.0.1".parse().unwrap())),
                ("fd00::5/64".to_string(), None)
            ]
        );
        assert_eq!(result.dns.nameservers, ["10.1.0.53", "fd00::53"]);
        assert_eq!(result.dns.domain, "example.org");
        assert_eq!(result.dns.search, ["a.example", "b.example"]);
        assert_eq!(result.routes.len(), 1, "the v4 default route only");
        let response = Response { lease: Some(v4), ..Response::ok() };
        assert_eq!(lease_of(response, Family::V6).unwrap_err().code, 1, "a v4 lease for a v6 ADD");
    }
}
