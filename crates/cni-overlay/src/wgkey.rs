//! The node's WireGuard private key on disk (`--wg-key-file`): made on first start from
//! the kernel's random bytes, then read back on every start, so the node keeps its identity
//! across restarts. Deleting the file (and restarting) rotates it; the new public key
//! reaches the peers through the node's record.
//!
//! The key decides who can read the node's pod traffic, so the file is trusted only when
//! nobody but this user could have written or read it: a regular file (not a link) owned by
//! us with no group or other permission, in a directory of ours that nobody else can write
//! into. Anything else is refused, never repaired: a key others could read is spent.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cni_net::wireguard::{self, Key};
use cni_os::fs::Durability;

use crate::{Error, Result};

/// The file holds the key as `wg genkey` prints it: 44 characters of base64 and a newline.
const MAX_KEY_FILE_BYTES: u64 = 128;

fn refused(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Config(format!("--wg-key-file {}: {why}", path.display()))
}

/// The key in `path`, made (and written 0600) when there is none.
pub fn load_or_create(path: &Path) -> Result<Key> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if dir.exists() {
        // An existing directory is checked, not tightened: it may hold other things.
        cni_os::fs::require_exclusive_dir(dir).map_err(|e| refused(path, e))?;
    } else {
        cni_os::fs::private_dir(dir).map_err(|e| refused(path, e))?;
    }
    match cni_os::fs::read_nofollow_limited(path, MAX_KEY_FILE_BYTES).map_err(|e| refused(path, e))? {
        Some(bytes) => {
            check_private(path)?;
            let text = std::str::from_utf8(&bytes).map_err(|_| refused(path, "is not text"))?;
            wireguard::parse_key(text.trim_end_matches('\n'))
                .map_err(|e| refused(path, format!("the key {e} (delete the file to make a new one)")))
        }
        None => {
            let key = wireguard::clamp(cni_os::random::bytes().map_err(|e| refused(path, e))?);
            let text = format!("{}\n", wireguard::base64(&key));
            cni_os::fs::write_atomic(path, text.as_bytes(), 0o600, Durability::Synced)
                .map_err(|e| refused(path, e))?;
            Ok(key)
        }
    }
}

/// A regular file of ours that only we can read or write.
fn check_private(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| refused(path, e))?;
    let me = cni_os::effective_uid();
    if !meta.is_file() {
        return Err(refused(path, "is not a regular file"));
    }
    if meta.uid() != me {
        return Err(refused(path, format!("is owned by uid {}, not {me}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refused(
            path,
            format!(
                "has mode {:o}: others can read or write it, so the key may be known (delete it)",
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("wg-key").tempdir().unwrap()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn a_key_is_made_once_private_and_kept() {
        let tmp = dir();
        let path = tmp.path().join("state/wireguard.key");
        let key = load_or_create(&path).unwrap();
        assert_eq!(key, wireguard::clamp(key), "clamped");
        assert_eq!((mode(&path), mode(path.parent().unwrap())), (0o600, 0o700));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", wireguard::base64(&key)));
        assert_eq!(load_or_create(&path).unwrap(), key, "read back, not remade");
        // Rotation: the operator deletes it.
        std::fs::remove_file(&path).unwrap();
        assert_ne!(load_or_create(&path).unwrap(), key);
    }

    #[test]
    fn a_key_file_others_could_touch_is_refused() {
        let tmp = dir();
        let path = tmp.path().join("wireguard.key");
        load_or_create(&path).unwrap();
        for wide in [0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wide)).unwrap();
            let err = load_or_create(&path).unwrap_err().to_string();
            assert!(err.contains("others can read or write"), "{wide:o}: {err}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A directory others can write into: they could swap the file.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(load_or_create(&path).is_err());
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(load_or_create(&path).is_ok());
    }

    #[test]
    fn a_planted_link_or_foreign_file_is_refused() {
        let tmp = dir();
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, format!("{}\n", wireguard::base64(&[7; 32]))).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = tmp.path().join("wireguard.key");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(load_or_create(&path).is_err(), "a link is not followed");
        std::fs::remove_file(&path).unwrap();
        // A key another user wrote (uid 65534, nobody), even with mode 0600.
        std::fs::copy(&target, &path).unwrap();
        if cni_os::is_root() {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            let err = load_or_create(&path).unwrap_err().to_string();
            assert!(err.contains("owned by uid 65534"), "{err}");
        }
    }

    #[test]
    fn a_damaged_key_is_refused_not_replaced() {
        let tmp = dir();
        let path = tmp.path().join("wireguard.key");
        for bad in ["", "short\n", "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"] {
            cni_os::fs::write_atomic(&path, bad.as_bytes(), 0o600, Durability::Unsynced).unwrap();
            let err = load_or_create(&path).unwrap_err().to_string();
            assert!(err.contains("delete the file"), "{bad:?}: {err}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), bad, "left for the operator");
        }
        cni_os::fs::write_atomic(&path, &[b'A'; 4096], 0o600, Durability::Unsynced).unwrap();
        assert!(load_or_create(&path).is_err());
    }
}
