//! The etcd-ipam configuration: where etcd is, the pools, how big a node's blocks are.
//!
//! ```json
//! "ipam": {
//!   "type": "etcd-ipam",
//!   "endpoints": ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"],
//!   "pools": ["10.244.0.0/16"],
//!   "blockSize": 26,
//!   "nodeName": "node-a",
//!   "routes": [{"dst": "0.0.0.0/0"}]
//! }
//! ```
//! `nodeName` defaults to the host name; `blockSize` to 26 (IPv4) or 122 (IPv6); `prefix`
//! (the root of the keys) to `/cni-rs/ipam`; `timeoutMs` (per etcd call, see
//! `cni_etcd::Client::call`) to 2000.
//! `nodeGracePeriodSeconds` turns on the reclaiming of gone nodes' blocks (see `liveness`).
//! `agentSocket` (a path) sends ADD and DEL through the node agent (`etcd-ipam agent`).
//! `https://` endpoints need `caFile` (the cluster's CA, PEM) and, for members that require
//! client certificates, `certFile` and `keyFile` (PEM); the members' certificates must name
//! the endpoints' hosts (IP SANs for addresses).

use std::path::PathBuf;
use std::time::Duration;

use cni_etcd::{Client, Tls, TlsFiles};
use cni_types::Route;
use ipnet::IpNet;
use serde::Deserialize;

use super::error::EtcdIpamError;

pub const DEFAULT_PREFIX: &str = "/cni-rs/ipam";

#[derive(Deserialize)]
pub(crate) struct RawConf {
    #[serde(default)]
    name: String,
    ipam: RawIpam,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    #[serde(default)]
    endpoints: Vec<String>,
    #[serde(default)]
    pools: Vec<String>,
    block_size: Option<u8>,
    node_name: Option<String>,
    prefix: Option<String>,
    timeout_ms: Option<u64>,
    #[serde(default)]
    routes: Vec<Route>,
    agent_socket: Option<PathBuf>,
    node_grace_period_seconds: Option<i64>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct EtcdIpamConf {
    pub network: String,
    pub endpoints: Vec<String>,
    pub pools: Vec<IpNet>,
    pub block_len: u8,
    pub node: String,
    pub prefix: String,
    pub timeout: Duration,
    pub routes: Vec<Route>,
    /// The node agent's socket: ADD and DEL go through the agent when set.
    pub agent_socket: Option<PathBuf>,
    /// With it, STATUS and GC record this node's heartbeat, and GC reclaims the blocks of
    /// nodes whose heartbeat is older than this many seconds.
    pub node_grace_seconds: Option<i64>,
    /// The TLS files of `https://` endpoints.
    pub tls: Option<TlsFiles>,
}

fn invalid(msg: impl Into<String>) -> EtcdIpamError {
    EtcdIpamError::InvalidConfig(msg.into())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A name that is safe as one segment of an etcd key.
fn validate_segment(field: &str, value: &str) -> Result<(), EtcdIpamError> {
    if value.is_empty() || value.len() > 253 || value.contains('/') || value.chars().any(char::is_control) {
        return Err(invalid(format!("{field} {value:?} must be 1-253 characters without '/'")));
    }
    Ok(())
}

/// The TLS files, when `caFile` is set; a client certificate and its key go together.
fn tls_files(
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
) -> Result<Option<TlsFiles>, EtcdIpamError> {
    match (ca_file, cert_file, key_file) {
        (None, None, None) => Ok(None),
        (None, _, _) => Err(invalid("ipam.caFile: certFile and keyFile need the cluster's CA")),
        (Some(ca_file), cert_file, key_file) => {
            if cert_file.is_some() != key_file.is_some() {
                return Err(invalid("ipam.certFile and ipam.keyFile go together: give both or neither"));
            }
            Ok(Some(TlsFiles { ca_file, cert_file, key_file }))
        }
    }
}

/// Every endpoint is `https://` with TLS files and none is without: a cluster is reached
/// one way, so a plain endpoint cannot silently downgrade a TLS configuration.
fn check_endpoint_schemes(endpoints: &[String], tls: bool) -> Result<(), EtcdIpamError> {
    for endpoint in endpoints {
        match (endpoint.starts_with("https://"), tls) {
            (true, false) => {
                return Err(invalid(format!(
                    "ipam.endpoints: {endpoint} is https:// but ipam.caFile is not set"
                )))
            }
            (false, true) => {
                return Err(invalid(format!(
                    "ipam.endpoints: {endpoint}: with ipam.caFile every endpoint must be https://"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The pools (of one family, none overlapping another) and the length of a node's block
/// prefix (26 or 122 unless set; it must fit every pool and hold 4 to 65536 addresses).
fn pools_and_block_len(pools: &[String], block_size: Option<u8>) -> Result<(Vec<IpNet>, u8), EtcdIpamError> {
    if pools.is_empty() {
        return Err(invalid("ipam.pools: at least one pool (a CIDR such as 10.244.0.0/16) is required"));
    }
    let pools = pools
        .iter()
        .map(|p| {
            p.parse::<IpNet>().map(|net| net.trunc()).map_err(|e| invalid(format!("ipam.pools: {p:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let family_v4 = matches!(pools[0], IpNet::V4(_));
    let block_len = block_size.unwrap_or(if family_v4 { 26 } else { 122 });
    for (i, pool) in pools.iter().enumerate() {
        if matches!(pool, IpNet::V4(_)) != family_v4 {
            return Err(invalid(format!("ipam.pools: {pool} is not of the first pool's address family")));
        }
        if block_len < pool.prefix_len() || block_len > pool.max_prefix_len() {
            return Err(invalid(format!("ipam.blockSize {block_len} does not fit pool {pool}")));
        }
        if pool.max_prefix_len() - block_len > 16 || pool.max_prefix_len() - block_len < 2 {
            return Err(invalid(format!("ipam.blockSize {block_len}: a block holds 4 to 65536 addresses")));
        }
        if let Some(other) = pools[..i].iter().find(|o| o.contains(pool) || pool.contains(*o)) {
            return Err(invalid(format!("ipam.pools: {pool} overlaps {other}")));
        }
    }
    Ok((pools, block_len))
}

impl EtcdIpamConf {
    pub fn parse(stdin: &[u8]) -> Result<EtcdIpamConf, EtcdIpamError> {
        let raw: RawConf = serde_json::from_slice(stdin)
            .map_err(|e| EtcdIpamError::Decode(format!("configuration: {e}")))?;
        validate_segment("name", &raw.name)?;
        let ipam = raw.ipam;
        if ipam.endpoints.is_empty() {
            return Err(invalid("ipam.endpoints: at least one etcd endpoint (http://host:port) is required"));
        }
        let tls = tls_files(ipam.ca_file, ipam.cert_file, ipam.key_file)?;
        check_endpoint_schemes(&ipam.endpoints, tls.is_some())?;
        let (pools, block_len) = pools_and_block_len(&ipam.pools, ipam.block_size)?;
        let node = ipam.node_name.unwrap_or_else(host_name);
        validate_segment("ipam.nodeName", &node)?;
        let prefix = ipam.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        if !prefix.starts_with('/') || prefix.ends_with('/') {
            return Err(invalid(format!("ipam.prefix {prefix:?} must start with '/' and not end with one")));
        }
        if ipam.node_grace_period_seconds.is_some_and(|s| s < 2) {
            return Err(invalid("ipam.nodeGracePeriodSeconds: at least 2"));
        }
        let timeout = Duration::from_millis(ipam.timeout_ms.unwrap_or(2000).max(1));
        Ok(EtcdIpamConf {
            network: raw.name,
            endpoints: ipam.endpoints,
            pools,
            block_len,
            node,
            prefix,
            timeout,
            routes: ipam.routes,
            agent_socket: ipam.agent_socket,
            node_grace_seconds: ipam.node_grace_period_seconds,
            tls,
        })
    }

    /// An etcd client for this configuration (TLS files read here: a bad one is a
    /// configuration error naming it).
    pub fn client(&self) -> Result<Client, EtcdIpamError> {
        let tls = self.tls.as_ref().map(Tls::load).transpose()?;
        Ok(Client::with_tls(&self.endpoints, self.timeout, tls)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ipam: &str) -> Result<EtcdIpamConf, EtcdIpamError> {
        EtcdIpamConf::parse(format!(r#"{{"name":"net","ipam":{ipam}}}"#).as_bytes())
    }

    #[test]
    fn defaults() {
        let conf =
            parse(r#"{"endpoints":["http://127.0.0.1:2379"],"pools":["10.1.0.5/16"],"nodeName":"n1"}"#)
                .unwrap();
        assert_eq!(conf.pools[0].to_string(), "10.1.0.0/16");
        assert_eq!((conf.block_len, conf.node.as_str(), conf.prefix.as_str()), (26, "n1", DEFAULT_PREFIX));
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            (r#"{"pools":["10.1.0.0/16"]}"#, "ipam.endpoints"),
            (r#"{"endpoints":["https://e:1"],"pools":["10.1.0.0/16"]}"#, "caFile"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/16"],"caFile":"/ca"}"#, "https://"),
            (r#"{"endpoints":["https://e:1"],"pools":["10.1.0.0/16"],"certFile":"/c"}"#, "caFile"),
            (
                r#"{"endpoints":["https://e:1"],"pools":["10.1.0.0/16"],"caFile":"/ca","certFile":"/c"}"#,
                "keyFile",
            ),
            (r#"{"endpoints":["http://e:1"]}"#, "ipam.pools"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/16","10.1.128.0/17"]}"#, "overlaps"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/24"],"blockSize":20}"#, "blockSize"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/24"],"blockSize":31}"#, "blockSize"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/16"],"nodeName":"a/b"}"#, "nodeName"),
            (r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/16","fd00::/64"]}"#, "family"),
            (
                r#"{"endpoints":["http://e:1"],"pools":["10.1.0.0/16"],"nodeGracePeriodSeconds":1}"#,
                "nodeGracePeriodSeconds",
            ),
        ];
        for (ipam, field) in cases {
            let err = parse(ipam).unwrap_err();
            assert_eq!(err.cni_code(), 7, "{ipam}: {err}");
            assert!(err.to_string().contains(field), "{ipam}: {err}");
        }
    }
}
