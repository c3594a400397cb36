//! "Already there" and "already gone" as success: what makes ADD retries and DEL
//! idempotent, for every kind of error the crates meet (files here, netlink and nftables in
//! cni-net), under one pair of names.
//!
//! An error type says what "missing" and "exists" mean for it by implementing
//! [`Existence`]; every `Result` with such an error then has [`Idempotent::ignore_missing`]
//! and [`Idempotent::ignore_exists`]. It lives in cni-os because cni-os is the one crate
//! that the plugins, cni-net and libcni all depend on.

use std::io;

/// What an error says about the existence of the object it was about.
pub trait Existence {
    /// The object to change or delete does not exist.
    fn is_missing(&self) -> bool;
    /// The object to create already exists.
    fn is_existing(&self) -> bool;
}

/// A file (or directory) that is not there, or already there.
impl Existence for io::Error {
    fn is_missing(&self) -> bool {
        self.kind() == io::ErrorKind::NotFound
    }

    fn is_existing(&self) -> bool {
        self.kind() == io::ErrorKind::AlreadyExists
    }
}

/// `ignore_missing` / `ignore_exists` on a result whose error knows [`Existence`].
pub trait Idempotent<T, E> {
    /// `Ok(None)` when the object to change or delete does not exist; other errors stay
    /// errors.
    fn ignore_missing(self) -> Result<Option<T>, E>;
    /// `Ok(None)` when the object to create already exists; other errors stay errors.
    fn ignore_exists(self) -> Result<Option<T>, E>;
}

impl<T, E: Existence> Idempotent<T, E> for Result<T, E> {
    fn ignore_missing(self) -> Result<Option<T>, E> {
        ignore_if(self, E::is_missing)
    }

    fn ignore_exists(self) -> Result<Option<T>, E> {
        ignore_if(self, E::is_existing)
    }
}

fn ignore_if<T, E>(result: Result<T, E>, ignored: impl FnOnce(&E) -> bool) -> Result<Option<T>, E> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if ignored(&err) => Ok(None),
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
