//! The portmap configuration, parsed and validated in one place before anything is touched.
//!
//! Keys (reference defaults): `snat` [true], `masqAll` [false], `markMasqBit` [13],
//! `externalSetMarkChain` (an iptables chain of another tool; refused here, see
//! [`PortmapConf::load`]), `conditionsV4` / `conditionsV6` (see [`super::conditions`]),
//! and the `portMappings` capability in `runtimeConfig`.

use super::conditions::Conditions;
use cni_sdk::{CniError, ErrorCode, Request};
use serde::Deserialize;
use std::fmt;
use std::net::IpAddr;

/// The mark bit the reference uses to ask for masquerading (0x2000).
pub const DEFAULT_MARK_MASQ_BIT: u32 = 13;

/// A transport protocol a host port can be mapped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => cni_net::nft::proto::TCP,
            Protocol::Udp => cni_net::nft::proto::UDP,
            Protocol::Sctp => cni_net::nft::proto::SCTP,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Case-insensitive, as iptables' `-p` is; empty means tcp (the reference default).
    pub fn parse(text: &str) -> Option<Protocol> {
        match text.to_ascii_lowercase().as_str() {
            "" | "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which destination addresses a mapping applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostIp {
    /// Every local address of both families (no `hostIP`).
    Any,
    /// Every local address of one family (`0.0.0.0` or `::`); `true` for IPv6.
    AnyOf { v6: bool },
    /// Exactly this address.
    Exactly(IpAddr),
}

impl HostIp {
    /// Whether the mapping applies to the IPv4 (`v6 == false`) or IPv6 side.
    pub fn applies_to(self, v6: bool) -> bool {
        match self {
            HostIp::Any => true,
            HostIp::AnyOf { v6: family } => family == v6,
            HostIp::Exactly(addr) => addr.is_ipv6() == v6,
        }
    }

    /// The address to match, if the mapping is restricted to one.
    pub fn address(self) -> Option<IpAddr> {
        match self {
            HostIp::Exactly(addr) => Some(addr),
            _ => None,
        }
    }
}

/// One validated entry of `runtimeConfig.portMappings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    pub host_ip: HostIp,
}

#[derive(Debug, Deserialize)]
struct RawPortMapping {
    #[serde(rename = "hostPort")]
    host_port: i64,
    #[serde(rename = "containerPort")]
    container_port: i64,
    #[serde(default)]
    protocol: String,
    #[serde(default, rename = "hostIP")]
    host_ip: String,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(default, rename = "portMappings")]
    port_mappings: Option<Vec<RawPortMapping>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    #[serde(default)]
    snat: Option<bool>,
    #[serde(default, rename = "masqAll")]
    masq_all: Option<bool>,
    #[serde(default, rename = "markMasqBit")]
    mark_masq_bit: Option<i64>,
    #[serde(default, rename = "externalSetMarkChain")]
    external_set_mark_chain: Option<String>,
    #[serde(default, rename = "conditionsV4")]
    conditions_v4: Option<Vec<String>>,
    #[serde(default, rename = "conditionsV6")]
    conditions_v6: Option<Vec<String>>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RawRuntimeConfig>,
}

/// The portmap configuration.
#[derive(Debug, Clone)]
pub struct PortmapConf {
    /// Masquerade traffic that needs it to come back (from localhost, hairpin).
    pub snat: bool,
    /// Masquerade every mapped connection, whatever its source.
    pub masq_all: bool,
    /// The packet mark bit that asks the postrouting chain to masquerade.
    pub mark_masq_bit: u32,
    pub conditions_v4: Conditions,
    pub conditions_v6: Conditions,
    /// Duplicates removed, order kept.
    pub mappings: Vec<PortMapping>,
}

fn invalid(msg: String) -> CniError {
    CniError::invalid_config(msg)
}

fn port(value: i64, what: &str) -> Result<u16, CniError> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid(format!("invalid portMappings {what} {value}: a port is 1 to 65535")))
}

fn mapping(raw: &RawPortMapping) -> Result<PortMapping, CniError> {
    let protocol = Protocol::parse(&raw.protocol).ok_or_else(|| {
        invalid(format!("unsupported port mapping protocol {:?} (tcp, udp or sctp)", raw.protocol))
    })?;
    let host_ip = match raw.host_ip.as_str() {
        "" => HostIp::Any,
        text => match text.parse::<IpAddr>() {
            Ok(addr) if addr.is_unspecified() => HostIp::AnyOf { v6: addr.is_ipv6() },
            Ok(addr) => HostIp::Exactly(addr),
            Err(_) => return Err(invalid(format!("invalid hostIP {text:?} in portMappings"))),
        },
    };
    Ok(PortMapping {
        host_port: port(raw.host_port, "hostPort")?,
        container_port: port(raw.container_port, "containerPort")?,
        protocol,
        host_ip,
    })
}

impl PortmapConf {
    /// Parses and validates the request's configuration.
    pub fn load(req: &Request) -> Result<PortmapConf, CniError> {
        let raw: RawConf = req.config()?;
        Self::from_raw(raw)
    }

    /// Parses a configuration given as JSON (for tests of the rule builders).
    #[cfg(test)]
    pub fn from_value(value: serde_json::Value) -> Result<PortmapConf, CniError> {
        Self::from_raw(cni_sdk::config::parse_value("config", &value)?)
    }

    fn from_raw(raw: RawConf) -> Result<PortmapConf, CniError> {
        if raw.external_set_mark_chain.is_some() && raw.mark_masq_bit.is_some() {
            return Err(invalid("cannot specify both externalSetMarkChain and markMasqBit".into()));
        }
        if let Some(chain) = &raw.external_set_mark_chain {
            // The reference jumps to an iptables chain of another tool (kube-proxy's
            // KUBE-MARK-MASQ); nftables rules cannot jump into iptables chains, and
            // dropping the key would silently change who masquerades.
            return Err(CniError::new(
                ErrorCode::UnsupportedField,
                format!(
                    "externalSetMarkChain {chain:?} is not supported: this portmap programs nftables, which cannot jump to an iptables chain; use markMasqBit"
                ),
            ));
        }
        let mark_masq_bit = match raw.mark_masq_bit {
            None => DEFAULT_MARK_MASQ_BIT,
            Some(bit @ 0..=31) => bit as u32,
            Some(bit) => return Err(invalid(format!("markMasqBit must be between 0 and 31, not {bit}"))),
        };
        let mut mappings = Vec::new();
        for raw in raw.runtime_config.and_then(|r| r.port_mappings).unwrap_or_default() {
            let m = mapping(&raw)?;
            if !mappings.contains(&m) {
                mappings.push(m);
            }
        }
        Ok(PortmapConf {
            snat: raw.snat.unwrap_or(true),
            masq_all: raw.masq_all.unwrap_or(false),
            mark_masq_bit,
            conditions_v4: Conditions::parse(
                "conditionsV4",
                raw.conditions_v4.as_deref().unwrap_or_default(),
                false,
            )?,
            conditions_v6: Conditions::parse(
                "conditionsV6",
                raw.conditions_v6.as_deref().unwrap_or_default(),
                true,
            )?,
            mappings,
        })
    }

    pub fn conditions(&self, v6: bool) -> &Conditions {
        if v6 {
            &self.conditions_v6
        } else {
            &self.conditions_v4
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> Result<PortmapConf, CniError> {
        PortmapConf::from_raw(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn defaults_match_the_reference() {
        let conf = parse(json!({})).unwrap();
        assert!(conf.snat);
        assert!(!conf.masq_all);
        assert_eq!(conf.mark_masq_bit, 13);
        assert!(conf.mappings.is_empty());
    }

    #[test]
    fn mappings_are_validated_and_deduplicated() {
        let conf = parse(json!({"runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8080, "containerPort": 80},
            {"hostPort": 53, "containerPort": 53, "protocol": "UDP", "hostIP": "0.0.0.0"},
            {"hostPort": 9, "containerPort": 9, "protocol": "sctp", "hostIP": "fd00::1"},
        ]}}))
        .unwrap();
        assert_eq!(conf.mappings.len(), 3);
        assert_eq!(conf.mappings[1].protocol, Protocol::Udp);
        assert_eq!(conf.mappings[1].host_ip, HostIp::AnyOf { v6: false });
        assert!(!conf.mappings[1].host_ip.applies_to(true));
        assert_eq!(conf.mappings[2].host_ip, HostIp::Exactly("fd00::1".parse().unwrap()));
    }

    #[test]
    fn bad_values_are_refused() {
        let bad = |v| parse(v).unwrap_err();
        assert_eq!(bad(json!({"markMasqBit": 32})).code, 7);
        assert_eq!(bad(json!({"markMasqBit": 13, "externalSetMarkChain": "KUBE-MARK-MASQ"})).code, 7);
        let e = bad(json!({"externalSetMarkChain": "KUBE-MARK-MASQ"}));
        assert_eq!(e.code, 2);
        assert!(e.msg.contains("externalSetMarkChain"));
        let m = |m| json!({"runtimeConfig": {"portMappings": [m]}});
        assert_eq!(bad(m(json!({"hostPort": 0, "containerPort": 80}))).code, 7);
        assert_eq!(bad(m(json!({"hostPort": 70000, "containerPort": 80}))).code, 7);
        assert_eq!(bad(m(json!({"hostPort": 80, "containerPort": 80, "protocol": "icmp"}))).code, 7);
        assert_eq!(bad(m(json!({"hostPort": 80, "containerPort": 80, "hostIP": "nope"}))).code, 7);
    }
}
