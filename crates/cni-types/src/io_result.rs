//! "Already there" and "already gone" as success, for file code (IPAM reservations, result
//! caches, plugin state).
//!
//! This lives here, in the one crate every runtime and plugin crate depends on, although
//! cni-types does no I/O: it only classifies an `io::Error` value. Netlink and nftables
//! errors have the same two methods in `cni_net::Idempotent` (cni-net does not depend on
//! cni-types, and libcni must not depend on cni-net).

use std::io;

/// `ignore_missing` / `ignore_exists` on an [`io::Result`].
pub trait IoResultExt<T> {
    /// `Ok(None)` when the file (or directory) is not there
    /// ([`io::ErrorKind::NotFound`]); other errors stay errors.
    fn ignore_missing(self) -> io::Result<Option<T>>;
    /// `Ok(None)` when the file to create exclusively is already there
    /// ([`io::ErrorKind::AlreadyExists`]); other errors stay errors.
    fn ignore_exists(self) -> io::Result<Option<T>>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn ignore_missing(self) -> io::Result<Option<T>> {
        ignore_kind(self, io::ErrorKind::NotFound)
    }

    fn ignore_exists(self) -> io::Result<Option<T>> {
        ignore_kind(self, io::ErrorKind::AlreadyExists)
    }
}

fn ignore_kind<T>(result: io::Result<T>, kind: io::ErrorKind) -> io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.kind() == kind => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_kind_is_ignored() {
        let missing: io::Result<u8> = Err(io::ErrorKind::NotFound.into());
        assert_eq!(missing.ignore_missing().unwrap(), None);
        let missing: io::Result<u8> = Err(io::ErrorKind::NotFound.into());
        assert!(missing.ignore_exists().is_err());
        let exists: io::Result<u8> = Err(io::ErrorKind::AlreadyExists.into());
        assert_eq!(exists.ignore_exists().unwrap(), None);
        let denied: io::Result<u8> = Err(io::ErrorKind::PermissionDenied.into());
        assert!(denied.ignore_missing().is_err());
        assert_eq!(Ok::<u8, io::Error>(7).ignore_missing().unwrap(), Some(7));
    }
}
