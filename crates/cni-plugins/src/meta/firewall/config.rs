//! The firewall plugin's configuration: `backend`, `ingressPolicy`,
//! `iptablesAdminChainName`, `firewalldZone` and `dataDir` (the firewalld backend's).

use cni_sdk::{CniError, Request};
use serde::Deserialize;
use std::path::PathBuf;

/// The default admin chain of the iptables backend (the reference's name).
pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
/// The firewalld zone container addresses go to (the reference's default).
pub const DEFAULT_FIREWALLD_ZONE: &str = "trusted";
/// Where the firewalld backend records the sources it added (see `firewalld::record`).
pub const DEFAULT_DATA_DIR: &str = "/run/cni/firewall";
/// iptables refuses longer chain names (`XT_EXTENSION_MAXNAMELEN` - 1).
const MAX_IPTABLES_CHAIN_LEN: usize = 28;

/// Where the rules go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Our own nftables table, programmed over netlink (the default).
    Nftables,
    /// The reference's `CNI-FORWARD`/`CNI-ADMIN` chains in iptables' filter table, through
    /// one `iptables-restore --noflush` per address family.
    Iptables,
    /// The container's addresses bound to a firewalld zone over D-Bus (see `firewalld`).
    Firewalld,
}

/// Who may open connections to the container (the reference's `ingressPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IngressPolicy {
    /// No restriction from this plugin.
    #[default]
    Open,
    /// Traffic between this bridge and other bridges that have a non-open policy is
    /// dropped, both ways (Docker's inter-network isolation).
    SameBridge,
    /// As `SameBridge`, and containers on the same bridge cannot reach this one either
    /// (Docker's `enable_icc=false`).
    Isolated,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawConf {
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    ingress_policy: Option<String>,
    #[serde(default)]
    iptables_admin_chain_name: Option<String>,
    #[serde(default)]
    firewalld_zone: Option<String>,
    #[serde(default)]
    data_dir: Option<PathBuf>,
}

/// The parsed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConf {
    pub backend: Backend,
    pub ingress_policy: IngressPolicy,
    pub admin_chain: String,
    /// Whether `backend` was given: without it, firewalld is used when it runs.
    pub backend_given: bool,
    pub firewalld_zone: String,
    pub data_dir: PathBuf,
}

/// Parses and validates the plugin's keys; nothing is touched before this succeeds.
pub fn load(req: &Request) -> Result<FirewallConf, CniError> {
    parse(req.config::<RawConf>()?)
}

fn parse(raw: RawConf) -> Result<FirewallConf, CniError> {
    let backend_given = raw.backend.as_deref().is_some_and(|b| !b.is_empty());
    let backend = match raw.backend.as_deref().unwrap_or("") {
        "" | "nftables" => Backend::Nftables,
        "iptables" => Backend::Iptables,
        "firewalld" => Backend::Firewalld,
        other => {
            return Err(CniError::invalid_config(format!(
                "backend: unknown firewall backend {other:?} (expected \"nftables\", \"iptables\" or \"firewalld\")"
            )))
        }
    };
    let firewalld_zone = match raw.firewalld_zone.as_deref().unwrap_or("") {
        "" => DEFAULT_FIREWALLD_ZONE.to_string(),
        zone if super::firewalld::valid_zone(zone) => zone.to_string(),
        zone => {
            return Err(CniError::invalid_config(format!(
            "firewalldZone: invalid zone name {zone:?} (up to 64 of A-Z a-z 0-9 - _ ., not starting with .)"
        )))
        }
    };
    let data_dir = match raw.data_dir {
        Some(dir) if dir.as_os_str().as_encoded_bytes().contains(&0) => {
            return Err(CniError::invalid_config("dataDir: a path cannot contain a NUL byte"))
        }
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => PathBuf::from(DEFAULT_DATA_DIR),
    };
    let ingress_policy = match raw.ingress_policy.as_deref().unwrap_or("") {
        "" | "open" => IngressPolicy::Open,
        "same-bridge" => IngressPolicy::SameBridge,
        "isolated" => IngressPolicy::Isolated,
        other => {
            return Err(CniError::invalid_config(format!("ingressPolicy: unknown ingress policy {other:?}")))
        }
    };
    let admin_chain = match raw.iptables_admin_chain_name.as_deref().unwrap_or("") {
        "" => DEFAULT_ADMIN_CHAIN.to_string(),
        name => {
            validate_chain_name(name)?;
            name.to_string()
        }
    };
    Ok(FirewallConf { backend, ingress_policy, admin_chain, backend_given, firewalld_zone, data_dir })
}

/// The admin chain's name ends up in an iptables-restore script: only characters that
/// cannot change the script's meaning are allowed.
pub(crate) fn validate_chain_name(name: &str) -> Result<(), CniError> {
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let builtin = ["INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING", "CNI-FORWARD"].contains(&name);
    if !ok_chars || name.len() > MAX_IPTABLES_CHAIN_LEN || name.starts_with('-') || builtin {
        return Err(CniError::invalid_config(format!(
            "iptablesAdminChainName: invalid chain name {name:?} (up to {MAX_IPTABLES_CHAIN_LEN} of A-Z a-z 0-9 - _ ., not a built-in chain)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(json: &str) -> Result<FirewallConf, CniError> {
        parse(cni_sdk::config::parse_config::<RawConf>(json.as_bytes())?)
    }

    #[test]
    fn defaults_are_nftables_open_cni_admin() {
        let c = parse_json(r#"{"name":"n","type":"firewall"}"#).unwrap();
        assert_eq!(
            c,
            FirewallConf {
                backend: Backend::Nftables,
                ingress_policy: IngressPolicy::Open,
                admin_chain: "CNI-ADMIN".into(),
                backend_given: false,
                firewalld_zone: "trusted".into(),
                data_dir: DEFAULT_DATA_DIR.into(),
            }
        );
        let c = parse_json(r#"{"backend":"","ingressPolicy":""}"#).unwrap();
        assert_eq!((c.backend, c.ingress_policy), (Backend::Nftables, IngressPolicy::Open));
    }

    #[test]
    fn every_key_is_read() {
        let c = parse_json(
            r#"{"backend":"iptables","ingressPolicy":"isolated","iptablesAdminChainName":"MY-ADMIN",
                "firewalldZone":"internal","dataDir":"/tmp/fw"}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            FirewallConf {
                backend: Backend::Iptables,
                ingress_policy: IngressPolicy::Isolated,
                admin_chain: "MY-ADMIN".into(),
                backend_given: true,
                firewalld_zone: "internal".into(),
                data_dir: "/tmp/fw".into(),
            }
        );
        assert_eq!(
            parse_json(r#"{"ingressPolicy":"same-bridge"}"#).unwrap().ingress_policy,
            IngressPolicy::SameBridge
        );
    }

    #[test]
    fn firewalld_is_a_backend_given_explicitly() {
        let c = parse_json(r#"{"backend":"firewalld"}"#).unwrap();
        assert_eq!(
            (c.backend, c.backend_given, c.firewalld_zone.as_str()),
            (Backend::Firewalld, true, "trusted")
        );
    }

    #[test]
    fn bad_values_are_invalid_config() {
        for bad in [
            r#"{"backend":"pf"}"#,
            r#"{"ingressPolicy":"closed"}"#,
            r#"{"iptablesAdminChainName":"A B"}"#,
            r#"{"iptablesAdminChainName":"FORWARD"}"#,
            r#"{"iptablesAdminChainName":"-j"}"#,
            r#"{"iptablesAdminChainName":"A23456789012345678901234567890"}"#,
            r#"{"backend":3}"#,
            r#"{"firewalldZone":"a zone"}"#,
            r#"{"firewalldZone":"../etc"}"#,
            r#"{"dataDir":"/a\u0000b"}"#,
        ] {
            assert_eq!(parse_json(bad).unwrap_err().code, 7, "{bad}");
        }
    }
}
