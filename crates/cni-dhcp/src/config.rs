//! The `dhcp` plugin's configuration (`ipam` object) and the client parameters made from it,
//! as the reference's:
//! - `daemonSocketPath` [/run/cni/dhcp.sock];
//! - `request`: `[{"skipDefault": true}, {"option": "121"}, ...]`: the options asked for
//!   (option 55); the defaults (what the result needs) unless `skipDefault`;
//! - `provide`: `[{"option": "host-name", "fromArg": "K8S_POD_NAME"}, {"option": "12",
//!   "value": "web"}]`: options sent to the server, the value given or taken from CNI_ARGS;
//! - `broadcast`: accepted (requests in INIT always ask for broadcast replies).
//!
//! And, beyond the reference (which speaks DHCPv4 only):
//! - `families`: `[4]` (the default), `[6]` or `[4, 6]`: which protocols to lease from; with
//!   both, one ADD gets a DHCPv4 and a DHCPv6 lease (or neither: a failed second one
//!   releases the first);
//! - `ipv6PrefixLength` [128]: the prefix length a DHCPv6 address gets (DHCPv6 carries
//!   none; see [`super::lease6`]).

use std::path::PathBuf;

use cni_sdk::{CniError, Request};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::client::ClientParams;
use super::options::DEFAULT_REQUESTED;
use super::protocol::DEFAULT_SOCKET_PATH;
use super::store::{AttachmentKey, Family};

#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    ipam: DhcpConf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DhcpConf {
    #[serde(default)]
    daemon_socket_path: Option<String>,
    #[serde(default)]
    request: Vec<RequestOption>,
    #[serde(default)]
    provide: Vec<ProvideOption>,
    #[serde(default)]
    #[allow(dead_code)] // accepted for compatibility; see the module doc
    broadcast: Option<bool>,
    #[serde(default)]
    families: Option<Vec<u8>>,
    #[serde(default)]
    ipv6_prefix_length: Option<u8>,
}

impl DhcpConf {
    /// The families to lease from, checked: 4 and/or 6, each once, IPv4 first.
    pub(super) fn families(&self) -> Result<Vec<Family>, CniError> {
        let Some(list) = &self.families else { return Ok(vec![Family::V4]) };
        let mut families = Vec::new();
        for (i, n) in list.iter().enumerate() {
            let family = Family::try_from(*n)
                .map_err(|e| CniError::invalid_config(format!("dhcp: ipam.families[{i}]: {e}")))?;
            if families.contains(&family) {
                return Err(CniError::invalid_config(format!(
                    "dhcp: ipam.families[{i}]: {n} is listed twice"
                )));
            }
            families.push(family);
        }
        if families.is_empty() {
            return Err(CniError::invalid_config("dhcp: ipam.families: empty; give [4], [6] or [4, 6]"));
        }
        families.sort();
        Ok(families)
    }

    fn prefix_len(&self) -> Result<Option<u8>, CniError> {
        match self.ipv6_prefix_length {
            Some(n @ 1..=128) => Ok(Some(n)),
            Some(n) => Err(CniError::invalid_config(format!(
                "dhcp: ipam.ipv6PrefixLength: {n} is not a prefix length (1-128)"
            ))),
            None => Ok(None),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestOption {
    #[serde(default)]
    skip_default: bool,
    #[serde(default)]
    option: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProvideOption {
    option: serde_json::Value,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    from_arg: Option<String>,
}

/// An option given by number (`121`, `"121"`) or by its usual name.
fn option_code(field: &str, value: &serde_json::Value) -> Result<u8, CniError> {
    let bad =
        || CniError::invalid_config(format!("dhcp: {field}: {value} is not a DHCP option (1-254 or a name)"));
    let code = match value {
        serde_json::Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        serde_json::Value::String(s) => match s.as_str() {
            "subnet-mask" => 1,
            "routers" | "router" => 3,
            "dns-servers" | "domain-name-servers" => 6,
            "host-name" | "hostname" => 12,
            "domain-name" => 15,
            "interface-mtu" => 26,
            "static-routes" => 33,
            "dhcp-renewal-time" => 58,
            "dhcp-rebinding-time" => 59,
            "dhcp-client-identifier" => 61,
            "domain-search" => 119,
            "classless-static-routes" | "classless-route" => 121,
            other => other.parse::<u64>().map_err(|_| bad())?,
        },
        _ => return Err(bad()),
    };
    match u8::try_from(code) {
        Ok(c @ 1..=254) => Ok(c),
        _ => Err(bad()),
    }
}

/// Option 61 for an attachment: type 0 (not a hardware address, RFC 2132 9.14) and a name
/// that is the same for every ADD of this attachment, so a server that keys leases by
/// client id gives the address back. Readable when it fits; hashed when it would not.
fn client_id(network: &str, container_id: &str, ifname: &str) -> Vec<u8> {
    let text = format!("{container_id}/{network}/{ifname}");
    let mut id = vec![0u8];
    if text.len() <= 200 {
        id.extend_from_slice(text.as_bytes());
    } else {
        let digest = Sha256::digest(text.as_bytes());
        id.extend(digest.iter().flat_map(|b| format!("{b:02x}").into_bytes()));
    }
    id
}

/// The DUID of an attachment (RFC 8415 11.5, DUID-UUID): type 4 and 16 bytes of a hash
/// of the attachment, the same for every ADD and every daemon that asks.
fn duid(network: &str, container_id: &str, ifname: &str) -> Vec<u8> {
    let digest = Sha256::digest(format!("cni-dhcp6/{container_id}/{network}/{ifname}").as_bytes());
    let mut duid = vec![0, 4];
    duid.extend_from_slice(&digest[..16]);
    duid
}

/// What the DHCPv6 client sends: the attachment's DUID; the options it asks for are fixed.
pub(super) fn params6(req: &Request, conf: &DhcpConf) -> Result<ClientParams, CniError> {
    Ok(ClientParams {
        client_id: duid(&req.conf.name, &req.container_id, &req.ifname),
        provide: Vec::new(),
        request: Vec::new(),
        prefix_len: conf.prefix_len()?,
    })
}

pub(crate) fn params(req: &Request, conf: &DhcpConf) -> Result<ClientParams, CniError> {
    let skip_default = conf.request.iter().any(|r| r.skip_default);
    let mut request: Vec<u8> = if skip_default { Vec::new() } else { DEFAULT_REQUESTED.to_vec() };
    for (i, r) in conf.request.iter().enumerate() {
        if let Some(o) = &r.option {
            let code = option_code(&format!("ipam.request[{i}].option"), o)?;
            if !request.contains(&code) {
                request.push(code);
            }
        }
    }
    let mut provide = Vec::new();
    for (i, p) in conf.provide.iter().enumerate() {
        let code = option_code(&format!("ipam.provide[{i}].option"), &p.option)?;
        let value = match (&p.value, &p.from_arg) {
            (Some(v), _) => v.clone(),
            (None, Some(arg)) => match req.args.get(arg) {
                Some(v) => v.to_string(),
                // Like the reference: an absent argument means nothing to provide.
                None => continue,
            },
            (None, None) => {
                return Err(CniError::invalid_config(format!(
                    "dhcp: ipam.provide[{i}]: needs value or fromArg"
                )))
            }
        };
        if value.is_empty() || value.len() > 255 {
            return Err(CniError::invalid_config(format!(
                "dhcp: ipam.provide[{i}]: the value must be 1-255 bytes, not {}",
                value.len()
            )));
        }
        provide.push((code, value.into_bytes()));
    }
    Ok(ClientParams {
        client_id: client_id(&req.conf.name, &req.container_id, &req.ifname),
        provide,
        request,
        prefix_len: None,
    })
}

pub(crate) fn load(req: &Request) -> Result<(DhcpConf, PathBuf), CniError> {
    let conf: RawConf = req.config()?;
    let socket = PathBuf::from(conf.ipam.daemon_socket_path.as_deref().unwrap_or(DEFAULT_SOCKET_PATH));
    Ok((conf.ipam, socket))
}

pub(super) fn key(req: &Request) -> AttachmentKey {
    AttachmentKey {
        network: req.conf.name.clone(),
        container_id: req.container_id.clone(),
        ifname: req.ifname.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn option_codes_by_number_or_name() {
        assert_eq!(option_code("f", &json!(121)).unwrap(), 121);
        assert_eq!(option_code("f", &json!("121")).unwrap(), 121);
        assert_eq!(option_code("f", &json!("host-name")).unwrap(), 12);
        let err = option_code("ipam.request[0].option", &json!("bogus")).unwrap_err();
        assert_eq!(err.code, 7);
        assert!(err.msg.contains("ipam.request[0].option"), "{}", err.msg);
        assert!(option_code("f", &json!(255)).is_err());
        assert!(option_code("f", &json!(0)).is_err());
        assert!(option_code("f", &json!([1])).is_err());
    }

    fn request(ipam: serde_json::Value, cni_args: &str) -> Request {
        let conf = json!({"cniVersion": "1.0.0", "name": "net", "type": "dhcp", "ipam": ipam}).to_string();
        Request {
            command: cni_sdk::Command::Add,
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            args: cni_types::args::CniArgs::parse(cni_args).unwrap(),
            path: vec![],
            stdin: conf.as_bytes().to_vec(),
            conf: serde_json::from_str(&conf).unwrap(),
            version: cni_sdk::Version::V1_0_0,
            trace: None,
        }
    }

    fn params_of(ipam: serde_json::Value, cni_args: &str) -> Result<ClientParams, CniError> {
        let req = request(ipam, cni_args);
        let (conf, _) = load(&req)?;
        params(&req, &conf)
    }

    #[test]
    fn request_and_provide_options() {
        let p = params_of(json!({"type": "dhcp"}), "").unwrap();
        assert_eq!(p.request, DEFAULT_REQUESTED);
        assert!(p.provide.is_empty());
        assert_eq!(p.client_id, b"\0c1/net/eth0");

        let p = params_of(
            json!({"type": "dhcp", "request": [{"skipDefault": true}, {"option": "classless-static-routes"}, {"option": 3}],
                   "provide": [{"option": "host-name", "fromArg": "K8S_POD_NAME"}, {"option": "60", "value": "cni"},
                               {"option": 77, "fromArg": "ABSENT"}]}),
            "IgnoreUnknown=1;K8S_POD_NAME=web-1",
        )
        .unwrap();
        assert_eq!(p.request, [121, 3]);
        assert_eq!(p.provide, [(12, b"web-1".to_vec()), (60, b"cni".to_vec())]);

        let err = params_of(json!({"type": "dhcp", "provide": [{"option": 12}]}), "").unwrap_err();
        assert!(err.msg.contains("ipam.provide[0]") && err.code == 7, "{err:?}");
        let err =
            params_of(json!({"type": "dhcp", "provide": [{"option": 12, "value": ""}]}), "").unwrap_err();
        assert!(err.msg.contains("ipam.provide[0]"), "{err:?}");
        let err = params_of(json!({"type": "dhcp", "daemonSocketPath": 5}), "").unwrap_err();
        assert!(err.msg.contains("daemonSocketPath"), "{err:?}");
    }

    #[test]
    fn families_and_the_v6_prefix_length_are_checked() {
        let conf = |ipam: serde_json::Value| load(&request(ipam, "")).unwrap().0;
        assert_eq!(conf(json!({"type": "dhcp"})).families().unwrap(), [Family::V4], "drop-in default");
        assert_eq!(conf(json!({"families": [6, 4]})).families().unwrap(), [Family::V4, Family::V6]);
        for (bad, field) in [
            (json!({"families": []}), "ipam.families"),
            (json!({"families": [4, 4]}), "ipam.families[1]"),
            (json!({"families": [5]}), "ipam.families[0]"),
        ] {
            let err = conf(bad.clone()).families().unwrap_err();
            assert!(err.code == 7 && err.msg.contains(field), "{bad}: {err:?}");
        }
        let err = load(&request(json!({"families": ["6"]}), "")).unwrap_err();
        assert!(err.msg.contains("families"), "{err:?}");
        let req = request(json!({"families": [6], "ipv6PrefixLength": 64}), "");
        let p = params6(&req, &load(&req).unwrap().0).unwrap();
        assert_eq!(p.prefix_len, Some(64));
        assert_eq!(&p.client_id[..2], &[0, 4], "DUID-UUID");
        assert_eq!(p.client_id.len(), 18);
        assert_eq!(p.client_id, params6(&req, &load(&req).unwrap().0).unwrap().client_id, "stable");
        for bad in [0, 129] {
            let err = conf(json!({"ipv6PrefixLength": bad})).prefix_len().unwrap_err();
            assert!(err.code == 7 && err.msg.contains("ipam.ipv6PrefixLength"), "{err:?}");
        }
    }

    #[test]
    fn client_ids_are_stable_and_bounded() {
        assert_eq!(client_id("net", "c1", "eth0"), b"\0c1/net/eth0");
        let long = client_id("net", &"a".repeat(300), "eth0");
        assert_eq!(long.len(), 65);
        assert_eq!(long, client_id("net", &"a".repeat(300), "eth0"));
    }
}
