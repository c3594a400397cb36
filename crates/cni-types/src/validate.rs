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

/// The longest network name accepted: it names host-local's state directory and is part
/// of libcni's cache file names, and no Linux file system takes a name over 255 bytes. A
/// longer name is refused up front, by every plugin, instead of failing half-way through
/// an ADD (or, in plugins that never use it as a file name, being accepted).
pub const MAX_NETWORK_NAME: usize = 255;

/// A network name: code 7 when invalid, as it comes from the configuration.
pub fn validate_network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    if name.len() > MAX_NETWORK_NAME {
        // Not echoed: the name can be megabytes long.
        return Err(CniError::invalid_config(format!(
            "network name too long: {} bytes, at most {MAX_NETWORK_NAME}",
            name.len()
        )));
    }
    if !matches_id_pattern(name) {
        return Err(CniError::invalid_config(format!("invalid characters in network name {name:?}"))
            .with_details("a network name must match ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$"));
    }
    Ok(())
}

/// What is wrong with `name` as an interface name, by the kernel's rules (which the spec
/// repeats): 1 to 15 bytes, not `.` or `..`, and no `/`, `:`, whitespace or NUL.
fn interface_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 15 {
        Some("it is longer than 15 bytes")
    } else if name == "." || name == ".." {
        Some("it is . or ..")
    } else if name.chars().any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace()) {
        Some("it contains '/', ':', NUL or whitespace")
    } else {
        None
    }
}

/// CNI_IFNAME: code 4, as it comes from the environment.
pub fn validate_interface_name(name: &str) -> Result<(), CniError> {
    match interface_name_problem(name) {
        None => Ok(()),
        Some(why) => Err(CniError::new(
            ErrorCode::InvalidEnvironment,
            format!("invalid interface name {name:?}: {why}"),
        )),
    }
}

/// An interface name given in the configuration (or a prevResult) as `field`: code 7,
/// with the field named, by the same rules as [`validate_interface_name`].
pub fn validate_interface_name_field(field: &str, name: &str) -> Result<(), CniError> {
    match interface_name_problem(name) {
        None => Ok(()),
        Some(why) => Err(CniError::invalid_config(format!("invalid {field} {name:?}: {why}"))),
    }
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
        assert!(validate_network_name(&"n".repeat(MAX_NETWORK_NAME)).is_ok());
        let long = validate_network_name(&"n".repeat(MAX_NETWORK_NAME + 1)).unwrap_err();
        assert_eq!(long.code, 7);
        assert!(long.msg.contains("network name too long: 256 bytes"), "{}", long.msg);
    }

    #[test]
    fn interface_names() {
        for ok in ["eth0", "a", "123456789012345", "eth0.100"] {
            assert!(validate_interface_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "1234567890123456", "a/b", "a:b", "a b", "a\tb", "a\0b"] {
            assert_eq!(validate_interface_name(bad).unwrap_err().code, 4, "{bad:?}");
            let e = validate_interface_name_field("bridge", bad).unwrap_err();
            assert_eq!(e.code, 7, "{bad:?}");
            assert!(e.msg.starts_with("invalid bridge "), "{}", e.msg);
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
