//! `conditionsV4` / `conditionsV6`: extra matches a mapped connection must meet.
//!
//! The reference appends these strings as iptables arguments to its per-container rule.
//! iptables matches cannot run in nftables, so the subset that has an exact nftables
//! equivalent is translated and everything else is refused with code 2 naming the key —
//! never silently dropped, since a dropped condition would open a port more widely than
//! the operator asked for. Supported, each optionally preceded by `!`:
//! `-s`/`--source`/`--src ADDR[/LEN]`, `-d`/`--destination`/`--dst ADDR[/LEN]`,
//! `-i`/`--in-interface NAME`. Arguments may be separate strings (`["-s", "10.0.0.0/8"]`,
//! the reference's form) or one string with spaces (`["-s 10.0.0.0/8"]`).

use cni_net::nft::RuleBuilder;
use cni_sdk::{CniError, ErrorCode};
use cni_types::validate::validate_interface_name_field;
use ipnet::IpNet;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Match {
    Source(IpNet),
    Destination(IpNet),
    InInterface(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    negated: bool,
    what: Match,
}

/// The translated conditions of one address family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions(Vec<Condition>);

fn unsupported(key: &str, why: String) -> CniError {
    CniError::new(ErrorCode::UnsupportedField, format!("{key}: {why}"))
}

fn network(key: &str, text: &str, v6: bool) -> Result<IpNet, CniError> {
    let net = text
        .parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| CniError::invalid_config(format!("{key}: invalid address {text:?}")))?;
    if matches!(net, IpNet::V6(_)) != v6 {
        let family = if v6 { "IPv6" } else { "IPv4" };
        return Err(CniError::invalid_config(format!("{key}: {text} is not an {family} address")));
    }
    Ok(net.trunc())
}

impl Conditions {
    /// Translates the strings of `key` (`conditionsV4` when `v6` is false).
    pub fn parse(key: &str, strings: &[String], v6: bool) -> Result<Conditions, CniError> {
        let tokens: Vec<&str> = strings.iter().flat_map(|s| s.split_whitespace()).collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let negated = tokens[i] == "!";
            if negated {
                i += 1;
            }
            let Some(option) = tokens.get(i) else {
                return Err(CniError::invalid_config(format!("{key}: \"!\" must precede a match")));
            };
            let Some(value) = tokens.get(i + 1) else {
                return Err(unsupported(key, format!("{option:?} without a value, or an unsupported match")));
            };
            let what = match *option {
                "-s" | "--source" | "--src" => Match::Source(network(key, value, v6)?),
                "-d" | "--destination" | "--dst" => Match::Destination(network(key, value, v6)?),
                "-i" | "--in-interface" => {
                    if value.ends_with('+') {
                        return Err(unsupported(
                            key,
                            format!("interface {value:?}: wildcards are not supported"),
                        ));
                    }
                    validate_interface_name_field(&format!("{key} interface"), value)?;
                    Match::InInterface(value.to_string())
                }
                other => {
                    return Err(unsupported(
                        key,
                        format!(
                            "the iptables match {other:?} is not supported (only -s, -d and -i, optionally negated with !)"
                        ),
                    ));
                }
            };
            out.push(Condition { negated, what });
            i += 2;
        }
        Ok(Conditions(out))
    }

    /// Adds the matches to a rule.
    pub fn apply(&self, mut rule: RuleBuilder) -> RuleBuilder {
        for c in &self.0 {
            rule = match (&c.what, c.negated) {
                (Match::Source(net), false) => rule.saddr(*net),
                (Match::Source(net), true) => rule.saddr_not(*net),
                (Match::Destination(net), false) => rule.daddr(*net),
                (Match::Destination(net), true) => rule.daddr_not(*net),
                (Match::InInterface(name), false) => rule.iifname(name),
                (Match::InInterface(name), true) => rule.iifname_not(name),
            };
        }
        rule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn supported_matches_translate() {
        let c = Conditions::parse(
            "conditionsV4",
            &strings(&["-s", "10.0.0.0/8", "! -d 10.1.2.3", "-i", "eth0"]),
            false,
        )
        .unwrap();
        assert_eq!(c.0.len(), 3);
        assert_eq!(
            c.0[1],
            Condition { negated: true, what: Match::Destination("10.1.2.3/32".parse().unwrap()) }
        );
        let v6 = Conditions::parse("conditionsV6", &strings(&["--source", "fd00::/8"]), true).unwrap();
        assert_eq!(v6.0.len(), 1);
    }

    #[test]
    fn unsupported_matches_are_refused_naming_the_key() {
        let e = Conditions::parse("conditionsV4", &strings(&["-m", "comment", "--comment", "x"]), false)
            .unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.msg.contains("conditionsV4") && e.msg.contains("-m"), "{}", e.msg);
        let e = Conditions::parse("conditionsV6", &strings(&["-p"]), true).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.msg.contains("conditionsV6"));
        let e = Conditions::parse("conditionsV4", &strings(&["-i", "eth+"]), false).unwrap_err();
        assert_eq!(e.code, 2);
        let e = Conditions::parse("conditionsV4", &strings(&["-i", ".."]), false).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("conditionsV4 interface"), "{}", e.msg);
        let e = Conditions::parse("conditionsV4", &strings(&["-s", "fd00::1"]), false).unwrap_err();
        assert_eq!(e.code, 7);
    }
}
