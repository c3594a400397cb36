//! The CNI error object and its well-known codes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Well-known error codes (spec section "Error", plus the two the reference also uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    IncompatibleVersion = 1,
    UnsupportedField = 2,
    UnknownContainer = 3,
    InvalidEnvironment = 4,
    Io = 5,
    Decode = 6,
    InvalidConfig = 7,
    /// CNI_NETNS is the plugin's own namespace (reference extension).
    InvalidNetNs = 8,
    TryAgainLater = 11,
    NotAvailable = 50,
    LimitedConnectivity = 51,
    /// Anything unexpected inside a plugin (reference extension).
    Internal = 999,
}

impl ErrorCode {
    pub fn as_u32(self) -> u32 {
        self as u32
    }

    /// The short message the spec gives each code.
    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::IncompatibleVersion => "incompatible CNI versions",
            ErrorCode::UnsupportedField => "unsupported field in network configuration",
            ErrorCode::UnknownContainer => "container unknown or does not exist",
            ErrorCode::InvalidEnvironment => "invalid necessary environment variables",
            ErrorCode::Io => "I/O failure",
            ErrorCode::Decode => "failed to decode content",
            ErrorCode::InvalidConfig => "invalid network config",
            ErrorCode::InvalidNetNs => "invalid network namespace",
            ErrorCode::TryAgainLater => "try again later",
            ErrorCode::NotAvailable => "plugin not available",
            ErrorCode::LimitedConnectivity => "plugin not available, limited connectivity",
            ErrorCode::Internal => "internal error",
        }
    }
}

impl From<ErrorCode> for u32 {
    fn from(c: ErrorCode) -> u32 {
        c as u32
    }
}

/// The error object a plugin prints on stdout (and a runtime reads back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: impl Into<u32>, msg: impl Into<String>) -> CniError {
        CniError { cni_version: String::new(), code: code.into(), msg: msg.into(), details: String::new() }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    pub fn with_version(mut self, version: impl Into<String>) -> CniError {
        self.cni_version = version.into();
        self
    }

    pub fn invalid_config(msg: impl Into<String>) -> CniError {
        CniError::new(ErrorCode::InvalidConfig, msg)
    }

    pub fn unsupported_field(field: &str, value: impl fmt::Display) -> CniError {
        CniError::new(ErrorCode::UnsupportedField, format!("unsupported field {field:?} with value {value}"))
    }

    pub fn io(msg: impl Into<String>) -> CniError {
        CniError::new(ErrorCode::Io, msg)
    }

    pub fn decode(msg: impl Into<String>) -> CniError {
        CniError::new(ErrorCode::Decode, msg)
    }

    pub fn internal(msg: impl Into<String>) -> CniError {
        CniError::new(ErrorCode::Internal, msg)
    }

    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.as_u32()
    }

    /// The JSON a plugin prints.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an error object always serialises")
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for CniError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_omits_empty_fields() {
        let e = CniError::new(ErrorCode::InvalidConfig, "bad subnet");
        assert_eq!(e.to_json(), r#"{"code":7,"msg":"bad subnet"}"#);
        let e = e.with_version("1.0.0").with_details("192.168.0.0/31 is too small");
        assert_eq!(
            e.to_json(),
            r#"{"cniVersion":"1.0.0","code":7,"msg":"bad subnet","details":"192.168.0.0/31 is too small"}"#
        );
    }

    #[test]
    fn error_parses_without_details() {
        let e: CniError = serde_json::from_str(r#"{"code":11,"msg":"busy"}"#).unwrap();
        assert!(e.is(ErrorCode::TryAgainLater));
        assert_eq!(e.to_string(), "busy");
    }
}
