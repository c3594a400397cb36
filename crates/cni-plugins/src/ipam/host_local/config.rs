//! The host-local IPAM configuration, parsed in one place from the plugin's stdin JSON and
//! `CNI_ARGS`, independent of the plugin SDK so that it can be unit-tested on its own.
//!
//! Sources of the ranges, in the reference's order: `runtimeConfig.ipRanges` (the
//! `ipRanges` capability) first, then the legacy top-level
//! `subnet`/`rangeStart`/`rangeEnd`/`gateway` as one range set, then `ranges`; only when
//! all are empty, the single range in the JSON file `rangeFromFile`. (The reference
//! prepends `ipRanges` rather than replacing `ranges`; we do the same, so a drop-in swap
//! hands out the same number of addresses.)
//!
//! Requested addresses come from `CNI_ARGS` `IP=` (comma-separated list allowed),
//! `args.cni.ips` and `runtimeConfig.ips`. They are merged and de-duplicated (podman sends the
//! same address twice in `runtimeConfig.ips`); each keeps the most authoritative source it
//! came from, so that when two sources ask for different addresses in the same range set
//! the allocator can honour the precedence `CNI_ARGS < args.cni < runtimeConfig`.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Deserialize;

use super::error::{codes, HostLocalError};
use super::range::{RangeSet, RangeSpec};

/// Where the reference keeps host-local state.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// Where a requested address came from, ordered by precedence (lowest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpSource {
    /// `CNI_ARGS` `IP=...`.
    CniArgs,
    /// `args.cni.ips` in the network config.
    ArgsCni,
    /// `runtimeConfig.ips` (the `ips` capability).
    RuntimeConfig,
}

/// One address the runtime asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestedIp {
    pub ip: IpAddr,
    pub source: IpSource,
}

/// A route to return in the result. Fields other than `dst`/`gw` (spec 1.1 `mtu`, `table`,
/// ...) are kept as they were given.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteSpec {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The validated configuration of one host-local invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct HostLocalConf {
    /// The network name: the name of the state directory under `data_dir`.
    pub network: String,
    pub cni_version: String,
    /// Range sets; each yields one address.
    pub range_sets: Vec<RangeSet>,
    pub routes: Vec<RouteSpec>,
    pub data_dir: PathBuf,
    /// Path of a resolv.conf-style file whose contents become the result's `dns`.
    pub resolv_conf: Option<String>,
    /// Requested addresses, de-duplicated, each with its most authoritative source.
    pub requested: Vec<RequestedIp>,
}

#[derive(Deserialize)]
pub(crate) struct RawConf {
    #[serde(default)]
    name: Option<String>,
    #[serde(rename = "cniVersion", default)]
    cni_version: Option<String>,
    #[serde(default)]
    ipam: Option<RawIpam>,
    #[serde(rename = "runtimeConfig", default)]
    runtime_config: Option<RawRuntimeConfig>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Deserialize)]
struct RawIpam {
    #[serde(default)]
    subnet: Option<String>,
    #[serde(rename = "rangeStart", default)]
    range_start: Option<String>,
    #[serde(rename = "rangeEnd", default)]
    range_end: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Vec<RangeSpec>>>,
    #[serde(default)]
    routes: Option<Vec<RawRoute>>,
    #[serde(rename = "dataDir", default)]
    data_dir: Option<String>,
    #[serde(rename = "resolvConf", default)]
    resolv_conf: Option<String>,
    #[serde(rename = "rangeFromFile", default)]
    range_from_file: Option<String>,
}

/// A route as written; keys other than `dst` and `gw` pass through to the result.
#[derive(Deserialize, serde::Serialize)]
#[serde(remote = "Self")]
struct RawRoute {
    #[serde(default)]
    dst: Option<String>,
    #[serde(default)]
    gw: Option<String>,
    #[serde(flatten, skip_deserializing)]
    extra: serde_json::Map<String, serde_json::Value>,
}

cni_types::keeps_unknown_keys!(RawRoute);

#[derive(Deserialize, Default)]
struct RawRuntimeConfig {
    #[serde(default)]
    ips: Option<Vec<String>>,
    #[serde(rename = "ipRanges", default)]
    ip_ranges: Option<Vec<Vec<RangeSpec>>>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawCniArgs>,
}

#[derive(Deserialize, Default)]
struct RawCniArgs {
    #[serde(default)]
    ips: Option<Vec<String>>,
}

fn invalid(msg: impl Into<String>) -> HostLocalError {
    HostLocalError::InvalidConfig(msg.into())
}

/// The network name becomes a directory name: it must be a single, ordinary path component.
pub fn validate_network_name(name: &str) -> Result<(), HostLocalError> {
    if name.is_empty() {
        return Err(invalid("name: missing network name"));
    }
    if name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(invalid(format!(
            "name: {name:?} is not a valid file name (it names the state directory)"
        )));
    }
    if name.len() > 255 {
        return Err(invalid("name: longer than 255 bytes (it names the state directory)"));
    }
    Ok(())
}

/// Parses an address as given in `ips` lists and `IP=`: a bare address or `address/prefix`.
fn parse_requested(field: &str, text: &str) -> Result<IpAddr, String> {
    let text = text.trim();
    let parsed = if text.contains('/') {
        text.parse::<IpNet>().map(|n| n.addr()).ok()
    } else {
        text.parse::<IpAddr>().ok()
    };
    parsed.ok_or_else(|| format!("{field}: invalid IP address {text:?}"))
}

/// Extracts the `IP` entries of a `CNI_ARGS` string (`K=V;K=V`, parsed as strictly as
/// the SDK does). Other keys are left to other consumers and ignored here; an empty or
/// malformed entry (`IP=`, `IP=a,,b`) is an error, not "no address requested".
pub fn requested_from_cni_args(cni_args: &str) -> Result<Vec<IpAddr>, HostLocalError> {
    let args = cni_types::args::CniArgs::parse(cni_args).map_err(|e| HostLocalError::InvalidEnv(e.msg))?;
    let mut ips = Vec::new();
    for (_, value) in args.pairs().iter().filter(|(key, _)| key == "IP") {
        for item in value.split(',') {
            ips.push(parse_requested("CNI_ARGS IP", item).map_err(HostLocalError::InvalidEnv)?);
        }
    }
    Ok(ips)
}

fn add_requested(list: &mut Vec<RequestedIp>, ip: IpAddr, source: IpSource) {
    match list.iter_mut().find(|r| r.ip == ip) {
        Some(existing) => existing.source = existing.source.max(source),
        None => list.push(RequestedIp { ip, source }),
    }
}

fn parse_route(raw: RawRoute, field: &str) -> Result<RouteSpec, HostLocalError> {
    let dst_text = raw.dst.ok_or_else(|| invalid(format!("{field}.dst: missing")))?;
    let dst = dst_text
        .trim()
        .parse::<IpNet>()
        .map_err(|_| invalid(format!("{field}.dst: invalid CIDR {dst_text:?}")))?;
    let gw = match raw.gw.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<IpAddr>()
                .map_err(|_| invalid(format!("{field}.gw: invalid IP address {text:?}")))?,
        ),
    };
    Ok(RouteSpec { dst, gw, extra: raw.extra })
}

/// The range sets in the reference's order, each with the JSON path used in messages:
/// `runtimeConfig.ipRanges`, then the legacy top-level range, then `ipam.ranges`; only if
/// there are none, the single range in the JSON file named by `ipam.rangeFromFile`.
fn range_set_specs(
    ipam: &RawIpam,
    runtime_ranges: Vec<Vec<RangeSpec>>,
) -> Result<Vec<(String, Vec<RangeSpec>)>, HostLocalError> {
    let mut set_specs: Vec<(String, Vec<RangeSpec>)> = Vec::new();
    for (i, set) in runtime_ranges.into_iter().enumerate() {
        set_specs.push((format!("runtimeConfig.ipRanges[{i}]"), set));
    }
    if let Some(subnet) = ipam.subnet.clone().filter(|s| !s.trim().is_empty()) {
        let legacy = RangeSpec {
            subnet,
            range_start: ipam.range_start.clone(),
            range_end: ipam.range_end.clone(),
            gateway: ipam.gateway.clone(),
        };
        set_specs.push(("ipam".to_string(), vec![legacy]));
    }
    for (i, set) in ipam.ranges.clone().unwrap_or_default().into_iter().enumerate() {
        set_specs.push((format!("ipam.ranges[{i}]"), set));
    }
    if let (true, Some(path)) =
        (set_specs.is_empty(), ipam.range_from_file.as_deref().filter(|p| !p.is_empty()))
    {
        let bytes =
            std::fs::read(path).map_err(|e| HostLocalError::io(path, "reading ipam.rangeFromFile", e))?;
        let spec: RangeSpec = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("ipam.rangeFromFile: {path}: not a range: {e}")))?;
        set_specs.push((format!("ipam.rangeFromFile({path})"), vec![spec]));
    }
    Ok(set_specs)
}

/// The range sets of `set_specs`, in order; a set overlapping an earlier one is an error
/// naming both.
fn disjoint_range_sets(set_specs: &[(String, Vec<RangeSpec>)]) -> Result<Vec<RangeSet>, HostLocalError> {
    let mut range_sets: Vec<RangeSet> = Vec::with_capacity(set_specs.len());
    for (field, specs) in set_specs {
        // The legacy top-level range is reported under its own keys (`ipam.subnet`).
        let set = if field == "ipam" {
            RangeSet::from_named_specs(specs, field, |_| "ipam".to_string())
        } else {
            RangeSet::from_specs(specs, field)
        }
        .map_err(invalid)?;
        if let Some(i) = range_sets.iter().position(|other| other.overlaps(&set)) {
            return Err(invalid(format!(
                "{field}: range set overlaps with {} ({})",
                set_specs[i].0, range_sets[i]
            )));
        }
        range_sets.push(set);
    }
    Ok(range_sets)
}

/// The addresses asked for through `CNI_ARGS`, `args.cni.ips` and `runtimeConfig.ips`, each
/// once, remembering the strongest source that asked for it.
fn requested_ips(
    cni_args: Option<&str>,
    arg_ips: &[String],
    runtime_ips: &[String],
) -> Result<Vec<RequestedIp>, HostLocalError> {
    let mut requested = Vec::new();
    if let Some(args) = cni_args {
        for ip in requested_from_cni_args(args)? {
            add_requested(&mut requested, ip, IpSource::CniArgs);
        }
    }
    for (i, text) in arg_ips.iter().enumerate() {
        let ip = parse_requested(&format!("args.cni.ips[{i}]"), text).map_err(invalid)?;
        add_requested(&mut requested, ip, IpSource::ArgsCni);
    }
    for (i, text) in runtime_ips.iter().enumerate() {
        let ip = parse_requested(&format!("runtimeConfig.ips[{i}]"), text).map_err(invalid)?;
        add_requested(&mut requested, ip, IpSource::RuntimeConfig);
    }
    Ok(requested)
}

impl HostLocalConf {
    /// Parses and validates the plugin's stdin and `CNI_ARGS` (pass `None` when unset).
    pub fn parse(stdin: &[u8], cni_args: Option<&str>) -> Result<Self, HostLocalError> {
        // Syntax errors are decode errors (code 6); a value of the wrong type or shape is an
        // invalid configuration (code 7) named by its path (`ipam.ranges[0][0].subnet`).
        let raw: RawConf = cni_sdk::config::parse_config(stdin).map_err(|e| match e.code {
            codes::DECODE => HostLocalError::Decode(format!("network config: {}", e.msg)),
            _ => invalid(e.msg),
        })?;
        let network = raw.name.unwrap_or_default();
        validate_network_name(&network)?;
        let ipam = raw.ipam.ok_or_else(|| invalid("ipam: missing"))?;
        let runtime = raw.runtime_config.unwrap_or_default();

        let set_specs = range_set_specs(&ipam, runtime.ip_ranges.unwrap_or_default())?;
        if set_specs.is_empty() {
            return Err(invalid("ipam.ranges: no IP ranges specified (need ranges or subnet)"));
        }
        let range_sets = disjoint_range_sets(&set_specs)?;
        let cni_version = raw.cni_version.unwrap_or_default();
        let v4_sets = range_sets.iter().filter(|s| s.is_ipv4()).count();
        if matches!(cni_version.as_str(), "" | "0.1.0" | "0.2.0")
            && (v4_sets > 1 || range_sets.len() - v4_sets > 1)
        {
            return Err(invalid(format!(
                "cniVersion {cni_version:?} does not support more than 1 address per family (use 0.3.0 or later)"
            )));
        }

        let mut routes = Vec::new();
        for (i, raw_route) in ipam.routes.unwrap_or_default().into_iter().enumerate() {
            routes.push(parse_route(raw_route, &format!("ipam.routes[{i}]"))?);
        }

        let arg_ips = raw.args.and_then(|a| a.cni).and_then(|c| c.ips).unwrap_or_default();
        let requested = requested_ips(cni_args, &arg_ips, &runtime.ips.unwrap_or_default())?;

        if ipam.data_dir.as_deref().is_some_and(|d| d.contains('\0')) {
            return Err(invalid("ipam.dataDir: contains a NUL byte"));
        }
        let data_dir = match ipam.data_dir.filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(DEFAULT_DATA_DIR),
        };
        Ok(HostLocalConf {
            network,
            cni_version,
            range_sets,
            routes,
            data_dir,
            resolv_conf: ipam.resolv_conf.filter(|r| !r.is_empty()),
            requested,
        })
    }

    /// The state directory of this network.
    pub fn network_dir(&self) -> PathBuf {
        self.data_dir.join(&self.network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str, args: Option<&str>) -> Result<HostLocalConf, HostLocalError> {
        HostLocalConf::parse(json.as_bytes(), args)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_value_of_the_wrong_shape_is_an_invalid_config_naming_its_path() {
        let e = parse(r#"{"name":"n","ipam":{"ranges":[[{"subnet":10}]]}}"#, None).unwrap_err();
        assert_eq!(e.cni_code(), codes::INVALID_CONFIG, "{e}");
        assert!(e.to_string().contains("ipam.ranges[0][0].subnet"), "{e}");
        let e = parse(r#"{"name":"n","ipam":{"#, None).unwrap_err();
        assert_eq!(e.cni_code(), codes::DECODE, "{e}");
        let e = parse(r#"{"name":"n","ipam":{"subnet":"10.1.0.0/16","dataDir":"/tmp/a\u0000b"}}"#, None)
            .unwrap_err();
        assert_eq!(e.cni_code(), codes::INVALID_CONFIG, "{e}");
        assert!(e.to_string().contains("ipam.dataDir"), "{e}");
    }

    #[test]
    fn ranges_legacy_and_defaults() {
        let c = parse(
            r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
            "subnet":"10.1.0.0/16","ranges":[[{"subnet":"10.2.0.0/24"},{"subnet":"10.3.0.0/24","gateway":"10.3.0.254"}],[{"subnet":"fd00::/64"}]],
            "routes":[{"dst":"0.0.0.0/0"},{"dst":"10.9.0.0/16","gw":"10.1.0.1","mtu":1400}],"resolvConf":"/etc/resolv.conf"}}"#,
            None,
        )
        .unwrap();
        assert_eq!(c.range_sets.len(), 3);
        assert_eq!(c.range_sets[0].to_string(), "10.1.0.1-10.1.255.254");
        assert_eq!(c.range_sets[1].ranges[1].gateway, ip("10.3.0.254"));
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(c.routes[1].gw, Some(ip("10.1.0.1")));
        assert_eq!(c.routes[1].extra["mtu"], 1400);
        assert_eq!(c.resolv_conf.as_deref(), Some("/etc/resolv.conf"));
        assert_eq!(c.network_dir(), PathBuf::from("/var/lib/cni/networks/n"));
    }

    #[test]
    fn runtime_ip_ranges_come_first_like_the_reference() {
        let c = parse(
            r#"{"cniVersion":"0.4.0","name":"n","ipam":{"subnet":"10.1.0.0/16","ranges":[[{"subnet":"fd00::/64"}]],"dataDir":"/tmp/x"},
            "runtimeConfig":{"ipRanges":[[{"subnet":"192.168.5.0/24","rangeStart":"192.168.5.10"}]]}}"#,
            None,
        )
        .unwrap();
        let sets: Vec<String> = c.range_sets.iter().map(ToString::to_string).collect();
        assert_eq!(
            sets,
            ["192.168.5.10-192.168.5.254", "10.1.0.1-10.1.255.254", "fd00::1-fd00::ffff:ffff:ffff:ffff"]
        );
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        // Two IPv4 range sets need a result format that can carry two IPv4 addresses.
        let old = r#"{"cniVersion":"0.2.0","name":"n","ipam":{"subnet":"10.1.0.0/16"},
            "runtimeConfig":{"ipRanges":[[{"subnet":"192.168.5.0/24"}]]}}"#;
        assert!(parse(old, None).unwrap_err().to_string().contains("more than 1 address per family"));
    }

    #[test]
    fn range_from_file_only_when_nothing_else_is_configured() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("range.json");
        std::fs::write(&file, r#"{"subnet":"10.7.0.0/24","rangeStart":"10.7.0.100"}"#).unwrap();
        let json = format!(r#"{{"name":"n","ipam":{{"rangeFromFile":"{}"}}}}"#, file.display());
        let c = parse(&json, None).unwrap();
        assert_eq!(c.range_sets[0].to_string(), "10.7.0.100-10.7.0.254");
        let json = format!(
            r#"{{"name":"n","ipam":{{"subnet":"10.8.0.0/24","rangeFromFile":"{}"}}}}"#,
            file.display()
        );
        assert_eq!(parse(&json, None).unwrap().range_sets.len(), 1);
        let json = r#"{"name":"n","ipam":{"rangeFromFile":"/nonexistent/range.json"}}"#;
        assert_eq!(parse(json, None).unwrap_err().cni_code(), 5);
    }

    #[test]
    fn requested_ips_merged_deduplicated_with_precedence() {
        let c = parse(
            r#"{"name":"n","ipam":{"subnet":"10.1.0.0/16"},
            "args":{"cni":{"ips":["10.1.0.7","10.1.0.9/16"]}},
            "runtimeConfig":{"ips":["10.1.0.50","10.1.0.50","10.1.0.7/16"]}}"#,
            Some("IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.1.0.8,fd00::8"),
        )
        .unwrap();
        let got: Vec<(String, IpSource)> = c.requested.iter().map(|r| (r.ip.to_string(), r.source)).collect();
        assert_eq!(
            got,
            vec![
                ("10.1.0.8".into(), IpSource::CniArgs),
                ("fd00::8".into(), IpSource::CniArgs),
                ("10.1.0.7".into(), IpSource::RuntimeConfig),
                ("10.1.0.9".into(), IpSource::ArgsCni),
                ("10.1.0.50".into(), IpSource::RuntimeConfig),
            ]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"name":"n","ipam":{}}"#, "ipam.ranges"),
            (r#"{"name":"n"}"#, "ipam: missing"),
            (r#"{"name":"a/b","ipam":{"subnet":"10.0.0.0/24"}}"#, "name:"),
            (r#"{"name":"..","ipam":{"subnet":"10.0.0.0/24"}}"#, "name:"),
            (r#"{"ipam":{"subnet":"10.0.0.0/24"}}"#, "name:"),
            (r#"{"name":"n","ipam":{"subnet":"10.0.0.0/31"}}"#, "ipam.subnet"),
            (r#"{"name":"n","ipam":{"ranges":[[{"subnet":"fd00::/127"}]]}}"#, "ipam.ranges[0][0].subnet"),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"}]]}}"#,
                "ipam.ranges[0][0].rangeStart",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/16"}]]}}"#,
                "ipam.ranges[1]: range set overlaps",
            ),
            (
                r#"{"name":"n","ipam":{"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]]}}"#,
                "mixed address families",
            ),
            (r#"{"name":"n","ipam":{"subnet":"10.0.0.0/24","routes":[{"dst":"x"}]}}"#, "ipam.routes[0].dst"),
            (
                r#"{"name":"n","ipam":{"subnet":"10.0.0.0/24"},"runtimeConfig":{"ips":["nope"]}}"#,
                "runtimeConfig.ips[0]",
            ),
        ];
        for (json, want) in cases {
            let err = parse(json, None).unwrap_err();
            assert_eq!(err.cni_code(), 7, "{json}");
            assert!(err.to_string().contains(want), "{json}: {err}");
        }
        let err = parse(r#"{"name":"n","ipam":{"subnet":"10.0.0.0/24"}}"#, Some("IP=1.2.3")).unwrap_err();
        assert_eq!(err.cni_code(), 4);
        let err = parse("{not json", None).unwrap_err();
        assert_eq!(err.cni_code(), 6);
    }
}
