//! Attaching a container to its networks (`add` per network, in order, rolled back on a
//! failure) and detaching it (`del` per network, every one attempted).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use cni_net::{NetNs, Netlink};
use serde_json::Value;

use crate::config::NetworkEntry;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::runtime::NETNS_DIR;
use crate::state::{check_uuid, AttachRecord, AttachedNetwork};

impl Host {
    /// Attaches container `uuid`, whose network namespace is `netns`, to `networks` (every
    /// configured network when `None`), in order. Returns the container's network metadata.
    ///
    /// Every interface template is rendered before the first `add`, against the names the
    /// namespace already has and those earlier networks took, so an unsatisfiable template
    /// runs nothing. When an `add` fails, `del` runs for the networks already added (last
    /// first) and the error of the failed `add` is returned.
    pub fn attach(&self, uuid: &str, netns: &Path, networks: Option<&[String]>) -> Result<AttachRecord> {
        let container_err = |message: String| Error::Container { uuid: uuid.to_string(), message };
        check_uuid(uuid).map_err(|why| container_err(why.to_string()))?;
        let netns = netns_path_for_plugins(netns).map_err(|why| container_err(why.to_string()))?;
        let _lock = self.state.lock_container(uuid)?;
        if self.state.read_container(uuid)?.is_some() {
            return Err(container_err("is already attached (detach it first)".into()));
        }
        let selected: Vec<&NetworkEntry> = match networks {
            None => self.config.networks.iter().collect(),
            Some(names) => names.iter().map(|name| self.entry(name)).collect::<Result<_>>()?,
        };
        let mut taken = interface_names(&netns).map_err(|why| container_err(why.to_string()))?;
        let mut plan = Vec::with_capacity(selected.len());
        for network in selected {
            if !matches!(self.plugin_status(&network.name).as_deref(), Some("created" | "running")) {
                return Err(Error::Network {
                    network: network.name.clone(),
                    message: "its plugin container is not running (start the plugins first)".into(),
                });
            }
            let interface = match &network.interface {
                None => None,
                Some(template) => {
                    let name = template.pick(&taken).map_err(|why| Error::Network {
                        network: network.name.clone(),
                        message: why.to_string(),
                    })?;
                    taken.insert(name.clone());
                    Some(name)
                }
            };
            plan.push((network, interface));
        }

        let mut record = AttachRecord { uuid: uuid.to_string(), netns: netns.clone(), networks: Vec::new() };
        for (network, interface) in plan {
            let args = plugin_args(&netns, uuid, interface.as_deref());
            let added =
                self.run(network, "add", &args).and_then(|stdout| parse_result(&network.name, &stdout));
            match added {
                Ok(result) => {
                    record.networks.push(AttachedNetwork {
                        network: network.name.clone(),
                        interface,
                        result,
                    });
                    // Written after every add, so a crash mid-attach still leaves what to detach.
                    self.state.write_container(&record)?;
                }
                Err(err) => {
                    // Roll back; the add's error is what the caller needs to see.
                    let _ = self.del_all(&mut record);
                    if record.networks.is_empty() {
                        self.state.remove_container(uuid)?;
                    } else {
                        self.state.write_container(&record)?;
                    }
                    return Err(err);
                }
            }
        }
        if record.networks.is_empty() {
            self.state.remove_container(uuid)?;
        }
        Ok(record)
    }

    /// Detaches container `uuid`: `del` for each attached network (last attached first),
    /// all attempted. Networks whose `del` failed stay recorded so that detaching again
    /// retries them. Detaching an unknown container succeeds (nothing to do).
    pub fn detach(&self, uuid: &str) -> Result<()> {
        check_uuid(uuid)
            .map_err(|why| Error::Container { uuid: uuid.to_string(), message: why.to_string() })?;
        let _lock = self.state.lock_container(uuid)?;
        let Some(mut record) = self.state.read_container(uuid)? else {
            return Ok(());
        };
        let errors = self.del_all(&mut record);
        if record.networks.is_empty() {
            self.state.remove_container(uuid)?;
        } else {
            self.state.write_container(&record)?;
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Detach { uuid: uuid.to_string(), errors })
        }
    }

    /// The metadata of an attached container.
    pub fn attached(&self, uuid: &str) -> Result<Option<AttachRecord>> {
        check_uuid(uuid)
            .map_err(|why| Error::Container { uuid: uuid.to_string(), message: why.to_string() })?;
        self.state.read_container(uuid)
    }

    /// Runs `del` for each network in `record`, last first; removes the ones that succeeded
    /// from the record and returns the errors of the others.
    fn del_all(&self, record: &mut AttachRecord) -> Vec<Error> {
        let mut errors = Vec::new();
        let mut kept = Vec::new();
        for attached in record.networks.drain(..).rev() {
            let args = plugin_args(&record.netns, &record.uuid, attached.interface.as_deref());
            let result = self.entry(&attached.network).and_then(|network| self.run(network, "del", &args));
            if let Err(err) = result {
                errors.push(err);
                kept.push(attached);
            }
        }
        kept.reverse();
        record.networks = kept;
        errors
    }
}

/// The `add`/`del` arguments: netns path, UUID and, when the network has one, interface.
fn plugin_args<'a>(netns: &'a Path, uuid: &'a str, interface: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec![netns.to_str().expect("netns paths are checked to be UTF-8"), uuid];
    args.extend(interface);
    args
}

/// The path plugins get: `/proc/PID/ns/net` (plugin containers see the host's processes)
/// or a namespace under `/run/netns` (shared into them); other paths would not resolve
/// inside a plugin container.
fn netns_path_for_plugins(netns: &Path) -> Result<PathBuf, NetnsError> {
    let path = || netns.to_path_buf();
    if netns.to_str().is_none() {
        return Err(NetnsError::NotUtf8 { path: path() });
    }
    NetNs::open(netns).map_err(|source| NetnsError::Open { path: path(), source })?;
    if netns.starts_with("/proc/") {
        return Ok(netns.to_path_buf());
    }
    let canonical = netns.canonicalize().map_err(|source| NetnsError::Resolve { path: path(), source })?;
    if canonical.starts_with(NETNS_DIR) && canonical.to_str().is_some() {
        return Ok(canonical);
    }
    Err(NetnsError::Elsewhere { path: path() })
}

/// The interface names the namespace has now.
fn interface_names(netns: &Path) -> Result<HashSet<String>, NetnsError> {
    let path = || netns.to_path_buf();
    let ns = NetNs::open(netns).map_err(|source| NetnsError::Open { path: path(), source })?;
    let mut netlink = Netlink::in_ns(&ns).map_err(|source| NetnsError::Netlink { path: path(), source })?;
    let links = netlink.links().map_err(|source| NetnsError::Links { path: path(), source })?;
    Ok(links.into_iter().map(|link| link.name).collect())
}

/// Why a container's network namespace path is refused or cannot be looked into.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespace path {} is not UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("network namespace {}: {source}", path.display())]
    Open { path: PathBuf, source: cni_net::Error },
    #[error("network namespace {}: {source}", path.display())]
    Resolve { path: PathBuf, source: std::io::Error },
    /// Neither `/proc/PID/ns/net` nor under the shared namespace directory: it would not
    /// resolve inside a plugin container.
    #[error("network namespace {}: must be /proc/PID/ns/net or under {NETNS_DIR}/", path.display())]
    Elsewhere { path: PathBuf },
    #[error("netlink in {}: {source}", path.display())]
    Netlink { path: PathBuf, source: cni_net::Error },
    #[error("list links in {}: {source}", path.display())]
    Links { path: PathBuf, source: cni_net::Error },
}

/// Parses what `add` printed: a Kurma result (`ip4`/`ip6`, each with an `ip` in CIDR
/// form). Empty output (e.g. loopback) is an empty result.
fn parse_result(network: &str, stdout: &str) -> Result<Value> {
    let fail = |message: String| Error::Network { network: network.to_string(), message };
    if stdout.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value = serde_json::from_str(stdout)
        .map_err(|err| fail(format!("/opt/network/add printed no JSON result ({err}): {stdout:?}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| fail(format!("/opt/network/add printed {stdout:?}, not a JSON object")))?;
    for family in ["ip4", "ip6"] {
        let Some(config) = object.get(family) else { continue };
        let ip = config.get("ip").and_then(Value::as_str).unwrap_or_default();
        if !is_cidr(ip) {
            return Err(fail(format!(
                "/opt/network/add result: {family}.ip {ip:?} is not an address in CIDR form"
            )));
        }
    }
    Ok(value)
}

fn is_cidr(text: &str) -> bool {
    let Some((addr, prefix)) = text.split_once('/') else { return false };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => prefix.parse::<u8>().is_ok_and(|p| p <= 32),
        Ok(std::net::IpAddr::V6(_)) => prefix.parse::<u8>().is_ok_and(|p| p <= 128),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_checked() {
        assert_eq!(parse_result("lo", "").unwrap(), serde_json::json!({}));
        let ok = parse_result("n", r#"{"ip4":{"ip":"10.1.0.2/16","gateway":"10.1.0.1"}}"#).unwrap();
        assert_eq!(ok["ip4"]["gateway"], "10.1.0.1");
        assert!(parse_result("n", "hello").unwrap_err().to_string().contains("no JSON result"));
        assert!(parse_result("n", r#"{"ip4":{"ip":"10.1.0.2"}}"#).unwrap_err().to_string().contains("CIDR"));
        assert!(parse_result("n", r#"{"ip6":{"ip":"fd00::2/64"}}"#).is_ok());
    }

    #[test]
    fn arguments_follow_the_spec() {
        let ns = Path::new("/proc/123/ns/net");
        assert_eq!(plugin_args(ns, "u-1", Some("eth0")), ["/proc/123/ns/net", "u-1", "eth0"]);
        assert_eq!(plugin_args(ns, "u-1", None), ["/proc/123/ns/net", "u-1"]);
    }
}
