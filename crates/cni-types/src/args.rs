//! `CNI_ARGS`: `K=V;K=V` pairs from the runtime.

use crate::error::{CniError, ErrorCode};

/// Parsed `CNI_ARGS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses `K=V;K=V`. Empty segments (a trailing `;`) are allowed; a segment without
    /// `=` is an error (code 4: CNI_ARGS comes from the environment).
    pub fn parse(s: &str) -> Result<CniArgs, CniError> {
        let mut pairs = Vec::new();
        for segment in s.split(';').filter(|seg| !seg.is_empty()) {
            let Some((k, v)) = segment.split_once('=') else {
                return Err(CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("invalid CNI_ARGS pair {segment:?}: expected KEY=VALUE"),
                ));
            };
            pairs.push((k.to_string(), v.to_string()));
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
    fn value_may_contain_equals() {
        let a = CniArgs::parse("K=a=b;").unwrap();
        assert_eq!(a.get("K"), Some("a=b"));
    }

    #[test]
    fn bad_pair_is_code_4() {
        assert_eq!(CniArgs::parse("IP").unwrap_err().code, 4);
    }

    #[test]
    fn unknown_keys_refused_without_ignore_unknown() {
        let a = CniArgs::parse("FOO=1").unwrap();
        let e = a.check_known(&["IP"]).unwrap_err();
        assert!(e.msg.contains("FOO"));
        assert!(CniArgs::parse("").unwrap().pairs().is_empty());
    }
}
