//! Parsing a plugin's own configuration struct with errors that name the field.

use cni_types::CniError;
use serde::de::DeserializeOwned;

/// Deserialises `bytes` into the plugin's configuration type. A failure is an
/// invalid-configuration error (code 7) whose message names the offending field path,
/// e.g. `invalid network config: ipam.ranges[0][0].subnet: invalid IP address syntax`.
pub fn parse_config<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CniError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            CniError::decode(format!("error decoding network config: {inner}"))
        } else if path == "." {
            CniError::invalid_config(format!("invalid network config: {inner}"))
        } else {
            CniError::invalid_config(format!("invalid network config: {path}: {inner}"))
        }
    })
}

/// Decodes the network configuration every plugin shares (`cniVersion`, `name`, ...): any
/// failure is a decode error (code 6), as the reference answers, and names the offending
/// field when it is one (`name: invalid type: integer `5`, expected a string`).
pub fn decode_network_config<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CniError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            CniError::decode(format!("error decoding network config: {inner}"))
        } else {
            CniError::decode(format!("error decoding network config: {path}: {inner}"))
        }
    })?;
    // Trailing content after the object is an error too, as with serde_json::from_slice.
    de.end().map_err(|e| CniError::decode(format!("error decoding network config: {e}")))?;
    Ok(value)
}

/// Parses one JSON value (e.g. a `runtimeConfig` entry) with the same error style.
pub fn parse_value<T: DeserializeOwned>(what: &str, value: &serde_json::Value) -> Result<T, CniError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { what.to_string() } else { format!("{what}.{path}") };
        CniError::invalid_config(format!("invalid {field}: {}", e.into_inner()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_config_decode_errors_name_the_field() {
        let e =
            decode_network_config::<cni_types::NetConf>(br#"{"cniVersion":"1.1.0","name":5}"#).unwrap_err();
        assert_eq!(e.code, 6);
        assert!(e.msg.contains("name: invalid type: integer"), "{}", e.msg);
        let e = decode_network_config::<cni_types::NetConf>(br#"{"cniVersion":"1.1.0","name":"n"} {}"#)
            .unwrap_err();
        assert_eq!(e.code, 6, "trailing content: {}", e.msg);
    }
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Conf {
        mtu: Option<u32>,
        ipam: Option<Ipam>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Ipam {
        ranges: Vec<Vec<Range>>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Range {
        subnet: ipnet::IpNet,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_config::<Conf>(br#"{"mtu":"big"}"#).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("mtu"), "{}", e.msg);
        let e = parse_config::<Conf>(br#"{"ipam":{"ranges":[[{"subnet":"10.0.0.0/33"}]]}}"#).unwrap_err();
        assert!(e.msg.contains("ipam.ranges[0][0].subnet"), "{}", e.msg);
    }

    #[test]
    fn syntax_errors_are_decode_errors() {
        assert_eq!(parse_config::<Conf>(b"{").unwrap_err().code, 6);
    }
}
