//! Spec versions, the VERSION result and version negotiation.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A version of the CNI specification this project speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

/// How results are shaped in a version. Versions in one family share one JSON layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFamily {
    /// 0.1.0 and 0.2.0: `ip4` / `ip6` objects.
    V02,
    /// 0.3.0, 0.3.1 and 0.4.0: `ips` with a `version` field.
    V04,
    /// 1.0.0 and 1.1.0: `ips` without `version`; 1.1 adds interface and route fields.
    V1,
}

impl Version {
    /// Every version, oldest first.
    pub const ALL: [Version; 7] = [
        Version::V0_1_0,
        Version::V0_2_0,
        Version::V0_3_0,
        Version::V0_3_1,
        Version::V0_4_0,
        Version::V1_0_0,
        Version::V1_1_0,
    ];

    /// The newest version: the one results are held in internally.
    pub const LATEST: Version = Version::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1_0 => "0.1.0",
            Version::V0_2_0 => "0.2.0",
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// Parses a `cniVersion` value. An empty string means 0.1.0, as the spec's first
    /// version had no version field.
    pub fn parse(s: &str) -> Result<Version, UnsupportedVersion> {
        if s.is_empty() {
            return Ok(Version::V0_1_0);
        }
        Version::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| UnsupportedVersion(s.to_string()))
    }

    pub fn family(self) -> ResultFamily {
        match self {
            Version::V0_1_0 | Version::V0_2_0 => ResultFamily::V02,
            Version::V0_3_0 | Version::V0_3_1 | Version::V0_4_0 => ResultFamily::V04,
            Version::V1_0_0 | Version::V1_1_0 => ResultFamily::V1,
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn supports_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// GC and STATUS exist from 1.1.0 on.
    pub fn supports_gc_and_status(self) -> bool {
        self >= Version::V1_1_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Version {
    type Err = UnsupportedVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Version::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A `cniVersion` this project does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported CNI version {0:?}")]
pub struct UnsupportedVersion(pub String);

/// The answer to VERSION, and what a runtime learns about a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

impl VersionInfo {
    /// What a plugin built on this project answers: every version, reported as 1.1.0
    /// whatever version the request carried (as the reference does).
    pub fn all() -> VersionInfo {
        VersionInfo {
            cni_version: Version::LATEST.as_str().to_string(),
            supported_versions: Version::ALL.iter().map(|v| v.as_str().to_string()).collect(),
        }
    }

    /// Every version from `min` on, for a plugin that cannot keep its contract in older
    /// ones (the firewall needs CHECK, and DEL's prevResult, which start at 0.4.0).
    pub fn since(min: Version) -> VersionInfo {
        VersionInfo {
            cni_version: Version::LATEST.as_str().to_string(),
            supported_versions: Version::ALL
                .iter()
                .filter(|v| **v >= min)
                .map(|v| v.as_str().to_string())
                .collect(),
        }
    }

    /// Whether the plugin claims to support `version`.
    pub fn supports(&self, version: &str) -> bool {
        let wanted = if version.is_empty() { "0.1.0" } else { version };
        self.supported_versions.iter().any(|v| v == wanted)
    }
}

/// Compares two dotted versions numerically ("0.10.0" > "0.9.0"); non-numeric parts
/// compare as 0 so that a malformed string never panics.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    let (pa, pb) = (parts(a), parts(b));
    let len = pa.len().max(pb.len());
    for i in 0..len {
        let (x, y) = (pa.get(i).copied().unwrap_or(0), pb.get(i).copied().unwrap_or(0));
        match x.cmp(&y) {
            std::cmp::Ordering::Equal => continue,
            other => return other,
        }
    }
    std::cmp::Ordering::Equal
}

/// Picks the version a runtime uses for a configuration list: the highest version among
/// `cniVersion` and `cniVersions` that `is_supported` accepts (spec 1.1).
pub fn select_list_version<'a>(
    cni_version: &'a str,
    cni_versions: &'a [String],
    is_supported: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    std::iter::once(cni_version)
        .chain(cni_versions.iter().map(String::as_str))
        .filter(|v| !v.is_empty() && is_supported(v))
        .max_by(|a, b| compare_versions(a, b))
}

/// The highest version both sides support, if any.
pub fn highest_common(ours: &[&str], theirs: &[String]) -> Option<String> {
    theirs.iter().filter(|v| ours.contains(&v.as_str())).max_by(|a, b| compare_versions(a, b)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_version_is_0_1_0() {
        assert_eq!(Version::parse("").unwrap(), Version::V0_1_0);
    }

    #[test]
    fn unknown_version_is_an_error() {
        assert!(Version::parse("0.5.0").is_err());
        assert!(Version::parse("1.1").is_err());
    }

    #[test]
    fn version_answer_lists_every_version() {
        let json = serde_json::to_string(&VersionInfo::all()).unwrap();
        assert_eq!(
            json,
            r#"{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
        );
    }

    #[test]
    fn since_lists_the_minimum_and_every_later_version() {
        let info = VersionInfo::since(Version::V0_4_0);
        assert_eq!(info.supported_versions, ["0.4.0", "1.0.0", "1.1.0"]);
        assert!(!info.supports("0.3.1") && !info.supports(""));
    }

    #[test]
    fn verbs_by_version() {
        assert!(!Version::V0_3_1.supports_check());
        assert!(Version::V0_4_0.supports_check());
        assert!(!Version::V1_0_0.supports_gc_and_status());
        assert!(Version::V1_1_0.supports_gc_and_status());
    }

    #[test]
    fn list_version_selection_takes_highest_supported() {
        let versions = vec!["1.1.0".to_string(), "0.3.1".to_string(), "9.0.0".to_string()];
        let supported = |v: &str| Version::parse(v).is_ok();
        assert_eq!(select_list_version("1.0.0", &versions, supported), Some("1.1.0"));
        assert_eq!(select_list_version("", &[], supported), None);
        assert_eq!(select_list_version("0.4.0", &[], supported), Some("0.4.0"));
    }

    #[test]
    fn numeric_version_compare() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("0.10.0", "0.9.0"), Greater);
        assert_eq!(compare_versions("1.0", "1.0.0"), Equal);
        assert_eq!(compare_versions("0.3.1", "0.4.0"), Less);
    }

    #[test]
    fn highest_common_version() {
        let theirs = vec!["0.3.1".to_string(), "0.4.0".to_string(), "2.0.0".to_string()];
        assert_eq!(highest_common(&["0.3.1", "0.4.0", "1.0.0"], &theirs).as_deref(), Some("0.4.0"));
        assert_eq!(highest_common(&["1.0.0"], &theirs), None);
    }
}
