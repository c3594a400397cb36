//! Validators for the names CNI passes around.
//!
//! The reference uses one pattern, `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, for network names and
//! container IDs; interface names follow the kernel's rules.

use crate::error::{CniError, ErrorCode};

fn matches_id_pattern(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A container ID: code 4 when invalid, as it comes from the environment.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::new(ErrorCode::InvalidEnvironment, "missing containerID"));
    }
    if !matches_id_pattern(id) {
        return Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("invalid characters in containerID {id:?}"),
        )
        .with_details("a containerID must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"));
    }
    Ok(())
}

/// A network name: code 7 when invalid, as it comes from the configuration.
pub fn validate_network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    if !matches_id_pattern(name) {
        return Err(CniError::invalid_config(format!("invalid characters in network name {name:?}"))
            .with_details("a network name must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"));
    }
    Ok(())
}

/// An interface name as the kernel accepts it: 1 to 15 bytes, not `.` or `..`, and no
/// `/`, `:` or whitespace. Code 4 (it comes from CNI_IFNAME).
pub fn validate_interface_name(name: &str) -> Result<(), CniError> {
    let fail = |why: &str| {
        Err(CniError::new(ErrorCode::InvalidEnvironment, format!("invalid interface name {name:?}: {why}")))
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > 15 {
        return fail("it is longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return fail("it is . or ..");
    }
    if name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return fail("it contains '/', ':' or whitespace");
    }
    Ok(())
}

/// A plugin `type`: it names an executable in CNI_PATH, so it must not be able to escape
/// that directory. Code 7.
pub fn validate_plugin_type(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config("plugin type is empty"));
    }
    if name == "." || name == ".." || name.contains('/') || name.contains('\\') || name.contains('\0') {
        return Err(CniError::invalid_config(format!(
            "invalid plugin type {name:?}: it must be a file name, not a path"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids() {
        for ok in ["a", "abc-123", "A.b_c-d", "0"] {
            assert!(validate_container_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "a:b", "ü"] {
            let e = validate_container_id(bad).unwrap_err();
            assert_eq!(e.code, 4, "{bad}");
        }
    }

    #[test]
    fn network_names() {
        assert!(validate_network_name("podman").is_ok());
        assert_eq!(validate_network_name("").unwrap_err().code, 7);
        assert_eq!(validate_network_name("a/b").unwrap_err().code, 7);
    }

    #[test]
    fn interface_names() {
        for ok in ["eth0", "a", "123456789012345", "eth0.100"] {
            assert!(validate_interface_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "1234567890123456", "a/b", "a:b", "a b", "a\tb"] {
            assert_eq!(validate_interface_name(bad).unwrap_err().code, 4, "{bad:?}");
        }
    }

    #[test]
    fn plugin_types() {
        assert!(validate_plugin_type("bridge").is_ok());
        for bad in ["", ".", "..", "../bridge", "/bin/sh", "a\\b"] {
            assert_eq!(validate_plugin_type(bad).unwrap_err().code, 7, "{bad}");
        }
    }
}
