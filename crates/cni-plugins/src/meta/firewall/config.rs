//! The firewall plugin's configuration: `backend`, `ingressPolicy`,
//! `iptablesAdminChainName` (and the reference's `firewalldZone`, accepted and unused).

use cni_sdk::{CniError, ErrorCode, Request};
use serde::Deserialize;

/// The default admin chain of the iptables backend (the reference's name).
pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
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
}

/// The parsed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConf {
    pub backend: Backend,
    pub ingress_policy: IngressPolicy,
    pub admin_chain: String,
}

/// Parses and validates the plugin's keys; nothing is touched before this succeeds.
pub fn load(req: &Request) -> Result<FirewallConf, CniError> {
    parse(req.config::<RawConf>()?)
}

fn parse(raw: RawConf) -> Result<FirewallConf, CniError> {
    let backend = match raw.backend.as_deref().unwrap_or("") {
        "" | "nftables" => Backend::Nftables,
        "iptables" => Backend::Iptables,
        "firewalld" => {
            return Err(CniError::new(
                ErrorCode::UnsupportedField,
                "backend: \"firewalld\" is not supported by cni-rs; use \"nftables\" or \"iptables\"",
            ))
        }
        other => {
            return Err(CniError::invalid_config(format!(
                "backend: unknown firewall backend {other:?} (expected \"nftables\" or \"iptables\")"
            )))
        }
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
    Ok(FirewallConf { backend, ingress_policy, admin_chain })
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
                admin_chain: "CNI-ADMIN".into()
            }
        );
        let c = parse_json(r#"{"backend":"","ingressPolicy":""}"#).unwrap();
        assert_eq!((c.backend, c.ingress_policy), (Backend::Nftables, IngressPolicy::Open));
    }

    #[test]
    fn every_key_is_read() {
        let c = parse_json(
            r#"{"backend":"iptables","ingressPolicy":"isolated","iptablesAdminChainName":"MY-ADMIN"}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            FirewallConf {
                backend: Backend::Iptables,
                ingress_policy: IngressPolicy::Isolated,
                admin_chain: "MY-ADMIN".into()
            }
        );
        assert_eq!(
            parse_json(r#"{"ingressPolicy":"same-bridge"}"#).unwrap().ingress_policy,
            IngressPolicy::SameBridge
        );
    }

    #[test]
    fn firewalld_is_refused_with_code_2_naming_the_key() {
        let e = parse_json(r#"{"backend":"firewalld"}"#).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.msg.contains("backend"), "{}", e.msg);
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
        ] {
            assert_eq!(parse_json(bad).unwrap_err().code, 7, "{bad}");
        }
    }
}
