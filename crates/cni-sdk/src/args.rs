//! The runtime's per-attachment arguments that several plugins read, with the reference's
//! precedence: CNI_ARGS < `args.cni` < `runtimeConfig`.

use crate::Request;
use cni_types::{CniError, ErrorCode};
use std::net::IpAddr;

/// An address a runtime asks for: `10.1.2.3` or `10.1.2.3/24` (the prefix is ignored by
/// IPAM, which takes it from the range).
fn parse_ip(field: &str, text: &str) -> Result<IpAddr, CniError> {
    let text = text.trim();
    let addr = text.split_once('/').map_or(text, |(a, _)| a);
    addr.parse().map_err(|_| CniError::invalid_config(format!("invalid IP address {text:?} in {field}")))
}

fn string_list(field: &str, value: &serde_json::Value) -> Result<Vec<String>, CniError> {
    crate::config::parse_value::<Vec<String>>(field, value)
}

/// Requested IPs from every source, highest precedence last, without repeats (podman
/// sends the same address twice in `runtimeConfig.ips`).
pub fn requested_ips(req: &Request) -> Result<Vec<IpAddr>, CniError> {
    let mut ips = Vec::new();
    if let Some(list) = req.args.get("IP") {
        // `IP=` and `IP=a,,b` are malformed, not "no address": refused like any bad address.
        // Code 4, not 7: CNI_ARGS is part of the environment, not the config.
        for item in list.split(',') {
            let ip = parse_ip("CNI_ARGS IP", item)
                .map_err(|e| CniError::new(ErrorCode::InvalidEnvironment, e.msg))?;
            ips.push(ip);
        }
    }
    if let Some(v) = req.conf.args_cni().and_then(|a| cni_types::fold::get(a, "ips")) {
        for item in string_list("args.cni.ips", v)? {
            ips.push(parse_ip("args.cni.ips", &item)?);
        }
    }
    if let Some(v) = req.conf.runtime_config("ips") {
        for item in string_list("runtimeConfig.ips", v)? {
            ips.push(parse_ip("runtimeConfig.ips", &item)?);
        }
    }
    let mut seen = std::collections::HashSet::new();
    ips.retain(|ip| seen.insert(*ip));
    Ok(ips)
}

/// A requested MAC address: the highest-precedence source wins.
pub fn requested_mac(req: &Request) -> Result<Option<String>, CniError> {
    let from_runtime = req.conf.runtime_config("mac");
    let from_args = req.conf.args_cni().and_then(|a| cni_types::fold::get(a, "mac"));
    let mac = match from_runtime.or(from_args) {
        Some(v) => Some(crate::config::parse_value::<String>("mac", v)?),
        None => req.args.get("MAC").map(str::to_string),
    };
    match mac {
        Some(m) if !is_mac(&m) => Err(CniError::invalid_config(format!("invalid MAC address {m:?}"))),
        other => Ok(other),
    }
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && u8::from_str_radix(p, 16).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, Version};
    use cni_types::args::CniArgs;

    fn req(conf: &str, cni_args: &str) -> Request {
        Request {
            command: Command::Add,
            container_id: "c".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: CniArgs::parse(cni_args).unwrap(),
            path: vec![],
            stdin: conf.as_bytes().to_vec(),
            conf: serde_json::from_str(conf).unwrap(),
            version: Version::V1_0_0,
            trace: None,
        }
    }

    #[test]
    fn ips_merge_in_precedence_order_without_repeats() {
        let r = req(
            r#"{"name":"n","type":"t","args":{"cni":{"ips":["10.0.0.3"]}},"runtimeConfig":{"ips":["10.0.0.4/24","10.0.0.4/24"]}}"#,
            "IgnoreUnknown=1;IP=10.0.0.2,10.0.0.4",
        );
        let got: Vec<String> = requested_ips(&r).unwrap().iter().map(|i| i.to_string()).collect();
        assert_eq!(got, ["10.0.0.2", "10.0.0.4", "10.0.0.3"]);
    }

    #[test]
    fn empty_or_malformed_cni_args_ip_is_code_4() {
        for args in ["IP=", "IP=10.0.0.2,,10.0.0.3", "IP=10.0.0.2,", "IP=ten"] {
            let e = requested_ips(&req(r#"{"name":"n","type":"t"}"#, args)).unwrap_err();
            assert_eq!(e.code, 4, "{args}");
            assert!(e.msg.contains("CNI_ARGS IP"), "{args}: {}", e.msg);
        }
    }

    #[test]
    fn bad_ip_names_its_source() {
        let r = req(r#"{"name":"n","type":"t","runtimeConfig":{"ips":["nope"]}}"#, "");
        let e = requested_ips(&r).unwrap_err();
        assert!(e.msg.contains("runtimeConfig.ips"), "{}", e.msg);
    }

    #[test]
    fn mac_runtime_config_beats_args_beats_cni_args() {
        let r = req(
            r#"{"name":"n","type":"t","args":{"cni":{"mac":"c2:00:00:00:00:02"}},"runtimeConfig":{"mac":"c2:00:00:00:00:03"}}"#,
            "MAC=c2:00:00:00:00:01",
        );
        assert_eq!(requested_mac(&r).unwrap().as_deref(), Some("c2:00:00:00:00:03"));
        let r = req(r#"{"name":"n","type":"t"}"#, "MAC=c2:00:00:00:00:01");
        assert_eq!(requested_mac(&r).unwrap().as_deref(), Some("c2:00:00:00:00:01"));
        let r = req(r#"{"name":"n","type":"t"}"#, "MAC=zz");
        assert_eq!(requested_mac(&r).unwrap_err().code, 7);
    }
}
