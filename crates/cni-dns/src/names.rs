//! Which names may be registered.
//!
//! A container's name and its aliases become DNS names under the network's domain, so each
//! must be made of labels the wire format and resolvers accept: 1-63 bytes of ASCII
//! letters, digits, `-` and `_` (podman and compose names use `_`, which resolvers pass
//! through), not starting or ending with `-`, at most 253 bytes in all with the domain.
//! Anything else is refused before it reaches the disk; the reference wrote whatever it was
//! given into dnsmasq's hosts file, where a space or newline in a name made extra entries.

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("is empty")]
    Empty,
    #[error("is {0} bytes long with the domain, at most 253")]
    TooLong(usize),
    #[error("has a label of {0} bytes, at most 63")]
    LabelTooLong(usize),
    #[error("has an empty label")]
    EmptyLabel,
    #[error("has a character that is not a letter, digit, '-' or '_' ({0:?})")]
    BadCharacter(char),
    #[error("has a label that starts or ends with '-'")]
    HyphenAtEdge,
    #[error("is all digits and dots, which reads as an address")]
    Numeric,
}

fn validate_labels(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > 63 {
            return Err(NameError::LabelTooLong(label.len()));
        }
        if let Some(bad) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
            return Err(NameError::BadCharacter(bad));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(NameError::HyphenAtEdge);
        }
    }
    Ok(())
}

/// A domain such as `dns.podman`: labels as above, without a trailing dot.
pub fn validate_domain(domain: &str) -> Result<(), NameError> {
    validate_labels(domain)?;
    if domain.len() > 253 {
        return Err(NameError::TooLong(domain.len()));
    }
    Ok(())
}

/// A container name or alias, registered as `<name>.<domain>`. Dotted names are several
/// labels; a name of digits and dots is refused so `10.0.0.1` cannot pose as a host.
pub fn validate_host_name(name: &str, domain: &str) -> Result<(), NameError> {
    validate_labels(name)?;
    if name.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(NameError::Numeric);
    }
    let full = name.len() + 1 + domain.len();
    if full > 253 {
        return Err(NameError::TooLong(full));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_container_names_pass() {
        for name in ["web", "Web-1", "project_web_1", "a", "db.primary", &"x".repeat(63)] {
            assert_eq!(validate_host_name(name, "dns.podman"), Ok(()), "{name}");
        }
    }

    #[test]
    fn names_that_are_not_dns_labels_are_refused() {
        let cases: &[(&str, NameError)] = &[
            ("", NameError::Empty),
            ("a b", NameError::BadCharacter(' ')),
            ("evil\n10.0.0.1 bank", NameError::BadCharacter('\n')),
            ("a..b", NameError::EmptyLabel),
            (".a", NameError::EmptyLabel),
            ("a.", NameError::EmptyLabel),
            ("-a", NameError::HyphenAtEdge),
            ("a-", NameError::HyphenAtEdge),
            ("caf\u{e9}", NameError::BadCharacter('\u{e9}')),
            ("a/b", NameError::BadCharacter('/')),
            ("10.0.0.1", NameError::Numeric),
            ("*", NameError::BadCharacter('*')),
        ];
        for (name, want) in cases {
            assert_eq!(validate_host_name(name, "dns.podman").as_ref(), Err(want), "{name:?}");
        }
        assert_eq!(validate_host_name(&"x".repeat(64), "d"), Err(NameError::LabelTooLong(64)));
        let long = vec!["x".repeat(60); 4].join(".");
        assert_eq!(validate_host_name(&long, "dns.podman"), Err(NameError::TooLong(254)));
    }

    #[test]
    fn domains() {
        assert_eq!(validate_domain("dns.podman"), Ok(()));
        assert_eq!(validate_domain("dns.podman."), Err(NameError::EmptyLabel));
        assert_eq!(validate_domain("a b"), Err(NameError::BadCharacter(' ')));
    }
}
