//! `CNI_ARGS`: `K=V;K=V` pairs from the runtime.

use crate::error::{CniError, ErrorCode};

/// Parsed `CNI_ARGS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses `K=V;K=V` strictly, as the reference does: every pair has a non-empty key
    /// and an `=` (the value may be empty, and may itself contain `=`); an empty pair
    /// (`;;`, a leading or trailing `;`) is refused. An empty string is no pairs. Errors
    /// are code 4 (CNI_ARGS comes from the environment) and name the bad pair.
    pub fn parse(s: &str) -> Result<CniArgs, CniError> {
        if s.is_empty() {
            return Ok(CniArgs::default());
        }
        let mut pairs = Vec::new();
        for (position, segment) in s.split(';').enumerate() {
            match segment.split_once('=') {
                Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
                _ => {
                    return Err(CniError::new(
                        ErrorCode::InvalidEnvironment,
                        format!(
                            "invalid CNI_ARGS pair {segment:?} (pair {} of {s:?}): expected KEY=VALUE",
                            position + 1
                        ),
                    ))
                }
            }
        }
        Ok(CniArgs { pairs })
    }

    pub fn from_pairs(pairs: Vec<(String, String)>) -> CniArgs {
        CniArgs { pairs }
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The last value given for `key` (later pairs override earlier ones).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown=1` (or `true`): keys a plugin does not know are not an error.
    pub fn ignore_unknown(&self) -> bool {
        matches!(self.get("IgnoreUnknown").map(str::to_ascii_lowercase).as_deref(), Some("1" | "true"))
    }

    /// Refuses keys outside `known` unless `IgnoreUnknown` is set, as the reference does.
    pub fn check_known(&self, known: &[&str]) -> Result<(), CniError> {
        if self.ignore_unknown() {
            return Ok(());
        }
        match self.pairs.iter().find(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str())) {
            Some((k, _)) => Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("unknown CNI_ARGS key {k:?} (set IgnoreUnknown=1 to allow it)"),
            )),
            None => Ok(()),
        }
    }

    /// Back to `K=V;K=V`.
    pub fn to_env_string(&self) -> String {
        self.pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_like_podman_sends() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.89.0.5").unwrap();
        assert!(a.ignore_unknown());
        assert_eq!(a.get("IP"), Some("10.89.0.5"));
        assert_eq!(a.get("MAC"), None);
        assert_eq!(a.to_env_string(), "IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.89.0.5");
        assert!(a.check_known(&["IP"]).is_ok());
    }

    #[test]
    fn value_may_contain_equals_or_be_empty() {
        let a = CniArgs::parse("K=a=b;E=").unwrap();
        assert_eq!(a.get("K"), Some("a=b"));
        assert_eq!(a.get("E"), Some(""));
    }

    #[test]
    fn bad_pairs_are_code_4_naming_the_pair() {
        for (args, bad) in [
            ("IP", "\"IP\""),
            (";;;", "\"\""),
            ("A=1;;B=2", "\"\""),
            ("A=1;", "\"\""),
            (";A=1", "\"\""),
            ("=1", "\"=1\""),
            ("A=1;B", "\"B\""),
        ] {
            let e = CniArgs::parse(args).unwrap_err();
            assert_eq!(e.code, 4, "{args}");
            assert!(e.msg.contains(&format!("pair {bad}")), "{args}: {}", e.msg);
        }
    }

    #[test]
    fn unknown_keys_refused_without_ignore_unknown() {
        let a = CniArgs::parse("FOO=1").unwrap();
        let e = a.check_known(&["IP"]).unwrap_err();
        assert!(e.msg.contains("FOO"));
        assert!(CniArgs::parse("").unwrap().pairs().is_empty());
    }
}
