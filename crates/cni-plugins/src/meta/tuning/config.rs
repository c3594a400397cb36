//! The tuning configuration, parsed and validated in one place before anything is touched.
//!
//! Sources, lowest precedence first: the plugin's own keys, CNI_ARGS `MAC`, `args.cni`
//! (`mac`, `mtu`, `promisc`, `allmulti`, `txQLen`, `sysctl` merged key by key), then
//! `runtimeConfig.mac` (the `mac` capability).

use cni_net::MacAddr;
use cni_os::Idempotent;
use cni_sdk::{CniError, Request};
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where ADD keeps the values it replaced, as the reference plugin does (`/run`: a
/// namespace does not outlive a reboot, so neither should its restore record).
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

/// The administrator's optional list of allowed sysctl keys (one regex per line).
pub const DEFAULT_ALLOWLIST: &str = "/etc/cni/tuning/allowlist.conf";

/// Overrides [`DEFAULT_ALLOWLIST`]. Meant for tests only: production hosts use the fixed
/// path, which is what operators of the reference plugin already manage.
pub const ALLOWLIST_ENV: &str = "CNI_TUNING_ALLOWLIST";

/// The smallest MTU an IPv4 interface may have (RFC 791).
const MIN_MTU: u32 = 68;

/// Sysctl settings in the order given. Duplicate keys are refused, as the reference does:
/// with JSON's last-one-wins the user would not know which value applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysctlList(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for SysctlList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = SysctlList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of sysctl keys to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SysctlList, A::Error> {
                let mut entries: Vec<(String, String)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("duplicated sysctl key {key:?}")));
                    }
                    entries.push((key, value));
                }
                Ok(SysctlList(entries))
            }
        }
        deserializer.deserialize_map(ListVisitor)
    }
}

/// The keys that may also come from `args.cni` (`mac` is read by
/// [`cni_sdk::args::requested_mac`] with the other MAC sources).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Overrides {
    #[serde(default)]
    sysctl: Option<SysctlList>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<i64>,
}

/// The plugin's own keys. (Not `#[serde(flatten)]` of [`Overrides`]: flattening loses the
/// field path in error messages.)
#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    #[serde(default, rename = "dataDir")]
    data_dir: Option<PathBuf>,
    #[serde(default)]
    sysctl: Option<SysctlList>,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<i64>,
}

/// One sysctl to set: the key as configured (for messages and the allowlist) and the key
/// with `IFNAME` replaced by the container's interface name (what is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlSetting {
    pub configured_key: String,
    pub key: String,
    pub value: String,
}

/// Everything tuning is asked to do, validated.
#[derive(Debug, Clone, Default)]
pub struct TuningConf {
    pub data_dir: PathBuf,
    pub sysctls: Vec<SysctlSetting>,
    pub mac: Option<MacAddr>,
    pub promisc: Option<bool>,
    pub mtu: Option<u32>,
    pub allmulti: Option<bool>,
    pub tx_qlen: Option<u32>,
}

impl TuningConf {
    /// Whether any link attribute (as opposed to a sysctl) is to be changed.
    pub fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc.is_some()
            || self.mtu.is_some()
            || self.allmulti.is_some()
            || self.tx_qlen.is_some()
    }
}

fn parse_mac(field: &str, text: &str) -> Result<MacAddr, CniError> {
    text.parse()
        .map_err(|_| CniError::invalid_config(format!("tuning: {field}: invalid MAC address {text:?}")))
}

fn parse_mtu(field: &str, mtu: i64) -> Result<u32, CniError> {
    match u32::try_from(mtu) {
        Ok(m) if m >= MIN_MTU => Ok(m),
        _ => Err(CniError::invalid_config(format!(
            "tuning: {field}: MTU {mtu} is below the minimum of {MIN_MTU}"
        ))),
    }
}

fn parse_txqlen(field: &str, len: i64) -> Result<u32, CniError> {
    u32::try_from(len)
        .map_err(|_| CniError::invalid_config(format!("tuning: {field}: txQLen {len} must be 0 or more")))
}

/// Why tuning refuses to write a sysctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysctlRefusal {
    /// The key is not under `net.` (or is not a key at all).
    NotNet,
    /// The value has a newline or NUL, which would smuggle a second write into the file.
    BadValue,
}

/// The one rule for every sysctl tuning writes: the configuration's at ADD and a record's
/// at DEL (a record on disk is only as trustworthy as the directory it lies in). `key` is
/// the key as written (`IFNAME` already replaced). Only keys under `/proc/sys/net/` pass:
/// they belong to the container's network namespace, where kernel.* or vm.* would reach
/// the host.
pub fn check_net_sysctl(key: &str, value: &str) -> Result<(), SysctlRefusal> {
    let path = cni_net::sysctl::key_to_path(key).map_err(|_| SysctlRefusal::NotNet)?;
    if !path.starts_with("/proc/sys/net/") || path == Path::new("/proc/sys/net") {
        return Err(SysctlRefusal::NotNet);
    }
    if value.contains(['\n', '\0']) {
        return Err(SysctlRefusal::BadValue);
    }
    Ok(())
}

/// Turns a configured key into the key to write, refusing what [`check_net_sysctl`]
/// refuses. The reference replaces the first `IFNAME` only; so do we.
fn sysctl_setting(configured_key: &str, value: &str, ifname: &str) -> Result<SysctlSetting, CniError> {
    let key = configured_key.replacen("IFNAME", ifname, 1);
    check_net_sysctl(&key, value).map_err(|refusal| {
        CniError::invalid_config(match refusal {
            SysctlRefusal::NotNet => format!("tuning: invalid net sysctl key {configured_key:?}"),
            SysctlRefusal::BadValue => format!(
                "tuning: invalid value {value:?} for sysctl {configured_key:?}: it contains a newline or NUL"
            ),
        })
    })?;
    Ok(SysctlSetting { configured_key: configured_key.to_string(), key, value: value.to_string() })
}

/// Reads the allowlist: `None` when there is no file (no restriction), else its regexes.
fn load_allowlist() -> Result<Option<Vec<regex_lite::Regex>>, CniError> {
    let path = std::env::var_os(ALLOWLIST_ENV).map(PathBuf::from).unwrap_or_else(|| DEFAULT_ALLOWLIST.into());
    let read = std::fs::read_to_string(&path).ignore_missing();
    let Some(text) =
        read.map_err(|e| CniError::io(format!("tuning: cannot read {}: {e}", path.display())))?
    else {
        return Ok(None);
    };
    let mut patterns = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let regex = regex_lite::Regex::new(line).map_err(|e| {
            CniError::invalid_config(format!("tuning: {}: invalid pattern {line:?}: {e}", path.display()))
        })?;
        patterns.push(regex);
    }
    Ok(Some(patterns))
}

/// Refuses sysctls the allowlist does not match (an unanchored match, as the reference).
fn check_allowlist(sysctls: &[SysctlSetting]) -> Result<(), CniError> {
    let Some(allowed) = load_allowlist()? else { return Ok(()) };
    for s in sysctls {
        if !allowed.iter().any(|r| r.is_match(&s.configured_key)) {
            let list: Vec<&str> = allowed.iter().map(regex_lite::Regex::as_str).collect();
            return Err(CniError::invalid_config(format!(
                "tuning: sysctl {} is not allowed; only sysctls matching {list:?} are",
                s.configured_key
            )));
        }
    }
    Ok(())
}

/// Just the data directory: all DEL and GC need. They must not fail on a configuration
/// that ADD would now refuse (an allowlist added later, a bad MAC in CNI_ARGS), or the
/// attachment could never be removed.
pub fn data_dir(req: &Request) -> Result<PathBuf, CniError> {
    #[derive(Deserialize)]
    struct DataDirOnly {
        #[serde(default, rename = "dataDir")]
        data_dir: Option<PathBuf>,
    }
    let conf: DataDirOnly = req.config()?;
    checked_data_dir(conf.data_dir)
}

/// `dataDir`, or the default when unset or empty; a NUL byte (no path has one) is code 7.
fn checked_data_dir(data_dir: Option<PathBuf>) -> Result<PathBuf, CniError> {
    use std::os::unix::ffi::OsStrExt;
    let dir = data_dir.filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| DEFAULT_DATA_DIR.into());
    if dir.as_os_str().as_bytes().contains(&0) {
        return Err(CniError::invalid_config(format!(
            "tuning: invalid dataDir {dir:?}: it contains a NUL byte"
        )));
    }
    Ok(dir)
}

/// Parses and validates the whole configuration for `req`.
pub fn load(req: &Request) -> Result<TuningConf, CniError> {
    let raw: RawConf = req.config()?;
    let args: Overrides = match req.conf.args_cni() {
        Some(a) => cni_sdk::config::parse_value("args.cni", &serde_json::Value::Object(a.clone()))?,
        None => Overrides::default(),
    };
    // CNI_IFNAME, which sysctl keys get in place of IFNAME, was validated by the SDK
    // (cni_types::validate::validate_interface_name) before any verb that has one.

    let mut sysctls = raw.sysctl.unwrap_or_default().0;
    for (key, value) in args.sysctl.unwrap_or_default().0 {
        match sysctls.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => sysctls.push((key, value)),
        }
    }
    let sysctls =
        sysctls.iter().map(|(k, v)| sysctl_setting(k, v, &req.ifname)).collect::<Result<Vec<_>, _>>()?;
    check_allowlist(&sysctls)?;

    // The MAC: own key < CNI_ARGS MAC < args.cni.mac < runtimeConfig.mac.
    let mac = match cni_sdk::args::requested_mac(req)? {
        Some(m) => Some(parse_mac("mac", &m)?),
        None => raw.mac.as_deref().filter(|m| !m.is_empty()).map(|m| parse_mac("mac", m)).transpose()?,
    };
    let mtu = match args.mtu.or(raw.mtu) {
        // The reference treats 0 as "not set".
        Some(0) | None => None,
        Some(m) => Some(parse_mtu(if args.mtu.is_some() { "args.cni.mtu" } else { "mtu" }, m)?),
    };
    let tx_qlen = match args.tx_qlen.or(raw.tx_qlen) {
        None => None,
        Some(l) => Some(parse_txqlen(if args.tx_qlen.is_some() { "args.cni.txQLen" } else { "txQLen" }, l)?),
    };
    // `promisc: false` in the plugin's own keys is the reference's default and means "leave
    // it"; only `true`, or an explicit value from args, asks for a change.
    let promisc = args.promisc.or(raw.promisc.filter(|p| *p));
    Ok(TuningConf {
        data_dir: checked_data_dir(raw.data_dir)?,
        sysctls,
        mac,
        promisc,
        mtu,
        allmulti: args.allmulti.or(raw.allmulti),
        tx_qlen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_is_substituted_and_only_net_keys_pass() {
        let s = sysctl_setting("net.ipv4.conf.IFNAME.arp_filter", "1", "eth0.100").unwrap();
        assert_eq!(s.key, "net.ipv4.conf.eth0.100.arp_filter");
        assert_eq!(s.configured_key, "net.ipv4.conf.IFNAME.arp_filter");
        for bad in [
            "kernel.hostname",
            "net",
            "net/../kernel/hostname",
            "netfoo.x",
            "vm.swappiness",
            "",
            "net.core.somaxconn\0",
        ] {
            let e = sysctl_setting(bad, "1", "eth0").unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
        }
        assert!(sysctl_setting("net/core/somaxconn", "1", "eth0").is_ok());
        assert_eq!(sysctl_setting("net.core.somaxconn", "1\n0", "eth0").unwrap_err().code, 7);
    }

    #[test]
    fn the_same_rule_refuses_what_a_planted_record_asks_for() {
        for key in [
            "kernel.domainname",
            "kernel.core_pattern",
            "kernel/core_pattern",
            "/kernel/core_pattern",
            "net/../kernel/core_pattern",
            "vm.overcommit_memory",
            "net",
            "",
        ] {
            assert_eq!(check_net_sysctl(key, "x"), Err(SysctlRefusal::NotNet), "{key}");
        }
        assert_eq!(check_net_sysctl("net.core.somaxconn", "1\0"), Err(SysctlRefusal::BadValue));
        assert_eq!(check_net_sysctl("net.ipv4.conf.eth0.100.arp_filter", "1"), Ok(()));
    }

    #[test]
    fn duplicate_sysctl_keys_are_refused() {
        let e = serde_json::from_str::<SysctlList>(r#"{"net.a":"1","net.a":"2"}"#).unwrap_err();
        assert!(e.to_string().contains("duplicated"), "{e}");
        let ok = serde_json::from_str::<SysctlList>(r#"{"net.b":"1","net.a":"2"}"#).unwrap();
        assert_eq!(ok.0[0].0, "net.b");
    }

    #[test]
    fn mtu_and_mac_validation_name_the_field() {
        assert!(parse_mtu("mtu", 67).unwrap_err().msg.contains("mtu"));
        assert_eq!(parse_mtu("mtu", 68).unwrap(), 68);
        assert!(parse_mtu("mtu", -1).is_err());
        assert!(parse_mac("mac", "zz:00:00:00:00:00").unwrap_err().msg.contains("mac"));
        assert!(parse_txqlen("txQLen", -5).unwrap_err().msg.contains("txQLen"));
    }
}
