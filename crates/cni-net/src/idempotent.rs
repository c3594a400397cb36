//! "Already there" and "already gone" as success: what makes ADD retries and DEL idempotent.
//!
//! One pair of methods for the errors of netlink ([`crate::Error`]) and nftables
//! ([`NftError`]), each keeping its own notion of "missing" (`ENOENT`, `ENODEV`, `ESRCH`,
//! `EADDRNOTAVAIL` for netlink; `ENOENT` for nf_tables). File code has the same methods in
//! `cni_types::IoResultExt`.

use crate::error::Error;
use crate::nft::NftError;

/// `ignore_missing` / `ignore_exists` on results of cni-net operations.
pub trait Idempotent<T, E> {
    /// `Ok(None)` when the object to change or delete does not exist.
    fn ignore_missing(self) -> Result<Option<T>, E>;
    /// `Ok(None)` when the object to create already exists.
    fn ignore_exists(self) -> Result<Option<T>, E>;
}

impl<T> Idempotent<T, Error> for Result<T, Error> {
    fn ignore_missing(self) -> Result<Option<T>, Error> {
        ignore_if(self, Error::is_not_found)
    }

    fn ignore_exists(self) -> Result<Option<T>, Error> {
        ignore_if(self, Error::is_already_exists)
    }
}

impl<T> Idempotent<T, NftError> for Result<T, NftError> {
    fn ignore_missing(self) -> Result<Option<T>, NftError> {
        ignore_if(self, NftError::is_not_found)
    }

    fn ignore_exists(self) -> Result<Option<T>, NftError> {
        ignore_if(self, NftError::is_already_exists)
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
    use crate::error::NetlinkError;

    fn kernel(errno: i32) -> Error {
        Error::netlink("op", NetlinkError::Kernel { errno, message: None })
    }

    #[test]
    fn netlink_missing_and_existing() {
        for errno in [libc::ENOENT, libc::ENODEV, libc::ESRCH, libc::EADDRNOTAVAIL] {
            assert_eq!(Err::<(), _>(kernel(errno)).ignore_missing().unwrap(), None);
        }
        assert_eq!(Err::<(), _>(kernel(libc::EEXIST)).ignore_exists().unwrap(), None);
        assert!(Err::<(), _>(kernel(libc::EEXIST)).ignore_missing().is_err());
        assert!(Err::<(), _>(kernel(libc::EPERM)).ignore_exists().is_err());
        assert_eq!(Ok::<_, Error>(3).ignore_missing().unwrap(), Some(3));
    }

    #[test]
    fn nftables_missing_and_existing() {
        let refused = |errno| NftError::Request { request: "x".into(), errno, message: None };
        assert_eq!(Err::<(), _>(refused(libc::ENOENT)).ignore_missing().unwrap(), None);
        assert_eq!(Err::<(), _>(refused(libc::EEXIST)).ignore_exists().unwrap(), None);
        assert!(Err::<(), _>(refused(libc::EBUSY)).ignore_missing().is_err());
    }
}
