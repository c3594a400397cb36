//! What "missing" and "exists" mean for netlink ([`crate::Error`], [`NetlinkError`]) and
//! nftables ([`NftError`]) errors: `ENOENT`, `ENODEV`, `ESRCH`, `EADDRNOTAVAIL` for
//! netlink; `ENOENT` for nf_tables; `EEXIST` for both. With these, their results have the
//! one idempotence helper, [`cni_os::Idempotent`] (re-exported as [`crate::Idempotent`]).

use crate::error::{Error, NetlinkError};
use crate::nft::NftError;
use cni_os::idempotent::Existence;

impl Existence for Error {
    fn is_missing(&self) -> bool {
        self.is_not_found()
    }

    fn is_existing(&self) -> bool {
        self.is_already_exists()
    }
}

/// A netlink exchange's own failure, before the operation is named: for cni-net's look-ups
/// that answer "no such object" with `None`.
impl Existence for NetlinkError {
    fn is_missing(&self) -> bool {
        self.errno().is_some_and(errno_means_missing)
    }

    fn is_existing(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

impl Existence for NftError {
    fn is_missing(&self) -> bool {
        self.is_not_found()
    }

    fn is_existing(&self) -> bool {
        self.is_already_exists()
    }
}

/// The errnos by which rtnetlink says the object is not there: `ENODEV` (link), `ENOENT`
/// (rule, neighbour, FDB entry, a link asked for by name), `ESRCH` (route),
/// `EADDRNOTAVAIL` (address).
pub(crate) fn errno_means_missing(errno: i32) -> bool {
    matches!(errno, libc::ENOENT | libc::ENODEV | libc::ESRCH | libc::EADDRNOTAVAIL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Idempotent;

    fn kernel(errno: i32) -> Error {
        Error::netlink("op", NetlinkError::Kernel { errno, message: None })
    }

    #[test]
    fn netlink_missing_and_existing() {
        for errno in [libc::ENOENT, libc::ENODEV, libc::ESRCH, libc::EADDRNOTAVAIL] {
            assert_eq!(Err::<(), _>(kernel(errno)).ignore_missing().unwrap(), None);
            let bare = NetlinkError::Kernel { errno, message: None };
            assert_eq!(Err::<(), _>(bare).ignore_missing().unwrap(), None);
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
