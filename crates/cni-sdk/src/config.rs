//! Parsing a plugin's own configuration struct with errors that name the field.
//!
//! Every configuration a plugin reads comes through these functions, and each deserialises
//! through [`cni_types::fold::deserialize`]: object keys match struct fields without regard to case (exact name
//! first), as the reference's Go decoder matches them. That is what lets a plugin take the
//! CRI path's Go-cased capability arguments (`{"portMappings":[{"HostPort":8080,...}]}`) and
//! an operator's `"IsGateway": true`. Error paths name keys as the input spelt them.

use cni_types::fold::deserialize as folded;
use cni_types::CniError;
use serde::de::DeserializeOwned;

/// Deserialises `bytes` into the plugin's configuration type. A failure is an
/// invalid-configuration error (code 7) whose message names the offending field path,
/// e.g. `invalid network config: ipam.ranges[0][0].subnet: invalid IP address syntax`.
pub fn parse_config<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CniError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    folded(&mut de).map_err(|(path, inner): (_, serde_json::Error)| {
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
    let value: T = folded(&mut de).map_err(|(path, inner)| {
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
    folded(value).map_err(|(path, inner)| {
        let field = if path == "." { what.to_string() } else { format!("{what}.{path}") };
        CniError::invalid_config(format!("invalid {field}: {inner}"))
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
    fn every_entry_point_folds_keys_and_errors_name_the_key_as_written() {
        let conf: Conf =
            parse_config(br#"{"MTU":1400,"Ipam":{"RANGES":[[{"Subnet":"10.0.0.0/24"}]]}}"#).unwrap();
        assert_eq!(conf.mtu, Some(1400));
        let e = parse_config::<Conf>(br#"{"IPAM":{"Ranges":[[{"SUBNET":"10.0.0.0/33"}]]}}"#).unwrap_err();
        assert!(e.msg.contains("IPAM.Ranges[0][0].SUBNET"), "{}", e.msg);
        let conf: cni_types::NetConf =
            decode_network_config(br#"{"CniVersion":"1.0.0","NAME":"n","Type":"bridge"}"#).unwrap();
        assert_eq!((conf.cni_version.as_str(), conf.name.as_str()), ("1.0.0", "n"));
        let range: Range =
            parse_value("runtimeConfig.x", &serde_json::json!({"SubNet":"10.0.0.0/8"})).unwrap();
        assert_eq!(range.subnet.to_string(), "10.0.0.0/8");
    }

    #[test]
    fn syntax_errors_are_decode_errors() {
        assert_eq!(parse_config::<Conf>(b"{").unwrap_err().code, 6);
    }
}
