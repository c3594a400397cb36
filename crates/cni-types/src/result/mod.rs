//! Results of every spec version, held internally as the newest (1.1.0) model.
//!
//! A result is parsed from the JSON of the version it was written in and printed in the
//! version a caller asked for; conversion between any two versions goes through the model.
//! The lossy directions follow the reference: printing as 0.1.0/0.2.0 keeps only the first
//! IPv4 and first IPv6 address and fails when there is none; printing as 0.3.x/0.4.0 drops
//! the 1.1-only fields and recomputes `ips[].version`.

mod v02;
mod v04;
mod v1;

use crate::config::Dns;
use crate::version::{ResultFamily, UnsupportedVersion, Version};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

/// An interface the plugin created or configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The namespace path for interfaces inside the container; empty on the host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    #[serde(rename = "socketPath", default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    #[serde(rename = "pciID", default, skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

/// An address assigned to an interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Index into `interfaces`; absent in the abbreviated result of an IPAM plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

impl IpConfig {
    pub fn is_ipv4(&self) -> bool {
        self.address.addr().is_ipv4()
    }
}

/// A route. Fields past `gw` exist from 1.1.0 on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Route {
        Route { dst, gw, mtu: None, advmss: None, priority: None, table: None, scope: None }
    }

    fn without_1_1_fields(&self) -> Route {
        Route::new(self.dst, self.gw)
    }
}

/// A result in the newest model. The version it is printed in is chosen at output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// Why a result could not be read or printed.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error(transparent)]
    UnsupportedVersion(#[from] UnsupportedVersion),
    #[error("cannot parse a {version} result: {source}")]
    Parse { version: Version, source: serde_json::Error },
    #[error("cannot convert the result to {0}: it has no IP addresses")]
    NoAddressForV02(Version),
}

impl ResultError {
    /// The CNI error a plugin or runtime reports for this failure.
    pub fn to_cni_error(&self) -> crate::CniError {
        use crate::ErrorCode;
        let code = match self {
            ResultError::UnsupportedVersion(_) | ResultError::NoAddressForV02(_) => {
                ErrorCode::IncompatibleVersion
            }
            ResultError::Parse { .. } => ErrorCode::Decode,
        };
        crate::CniError::new(code, self.to_string())
    }
}

impl CniResult {
    /// Reads a result written in `version`'s layout. Keys match without regard to case, as
    /// the reference's decoder matches them (a `prevResult` is the runtime's text).
    pub fn from_value(value: Value, version: Version) -> Result<CniResult, ResultError> {
        let parse_err = |source| ResultError::Parse { version, source };
        let parse_err = |(_path, source)| parse_err(source);
        use crate::fold::deserialize;
        match version.family() {
            ResultFamily::V02 => deserialize::<v02::ResultV02, _>(value).map(Into::into).map_err(parse_err),
            ResultFamily::V04 => deserialize::<v04::ResultV04, _>(value).map(Into::into).map_err(parse_err),
            ResultFamily::V1 => deserialize::<v1::ResultV1, _>(value).map(Into::into).map_err(parse_err),
        }
    }

    /// Reads a result that names its own version in `cniVersion`; one without it is taken
    /// to be in `default_version` (the configuration's). Returns the version it was in.
    pub fn parse(value: Value, default_version: Version) -> Result<(CniResult, Version), ResultError> {
        let named = value.as_object().and_then(|object| crate::fold::get(object, "cniVersion"));
        let version = match named.and_then(Value::as_str) {
            Some(v) => Version::parse(v)?,
            None => default_version,
        };
        Ok((CniResult::from_value(value, version)?, version))
    }

    /// Parses JSON bytes; see [`CniResult::parse`].
    pub fn parse_bytes(bytes: &[u8], default_version: Version) -> Result<(CniResult, Version), ResultError> {
        let value = serde_json::from_slice(bytes)
            .map_err(|source| ResultError::Parse { version: default_version, source })?;
        CniResult::parse(value, default_version)
    }

    /// Prints the result in `version`'s layout, `cniVersion` included.
    pub fn to_value(&self, version: Version) -> Result<Value, ResultError> {
        let value = match version.family() {
            ResultFamily::V02 => serde_json::to_value(v02::ResultV02::from_model(self, version)?),
            ResultFamily::V04 => serde_json::to_value(v04::ResultV04::from_model(self, version)),
            ResultFamily::V1 => serde_json::to_value(v1::ResultV1::from_model(self, version)),
        };
        Ok(value.expect("result types always serialise"))
    }

    /// Converts JSON written in one version into another version's JSON.
    pub fn convert(value: Value, from: Version, to: Version) -> Result<Value, ResultError> {
        CniResult::from_value(value, from)?.to_value(to)
    }

    /// Addresses of the given interface index (or, with `None`, those bound to none).
    pub fn ips_of(&self, interface: Option<usize>) -> impl Iterator<Item = &IpConfig> {
        self.ips.iter().filter(move |ip| ip.interface == interface)
    }
}

#[cfg(test)]
mod tests;
