//! Error types of cni-net.
//!
//! [`Error`] is what every public function returns. Each variant says *what* was being done
//! (which link, which namespace path, which sysctl key) and keeps the underlying cause, so a
//! plugin can print a useful CNI error message and still branch on the errno (for example
//! "bridge already exists" is success, "link not found" on DEL is success: see
//! [`crate::Idempotent`]).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Result alias used across cni-net.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Failure of one netlink exchange, before the operation context is attached.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel answered with an `NLMSG_ERROR` carrying a non-zero errno.
    #[error("{}{}", io::Error::from_raw_os_error(*errno), kernel_message_suffix(message))]
    Kernel {
        /// Positive errno value (e.g. `libc::EEXIST`).
        errno: i32,
        /// The kernel's extended-ack text, when it sent one.
        message: Option<String>,
    },
    /// Sending on or receiving from the netlink socket failed.
    #[error("netlink socket: {0}")]
    Io(#[from] io::Error),
    /// A reply could not be decoded.
    #[error("cannot decode netlink reply: {0}")]
    Decode(String),
    /// The kernel kept interrupting a dump (the table changed while it was dumped).
    #[error("dump interrupted by concurrent changes {attempts} times in a row")]
    DumpInterrupted {
        /// How many attempts were made.
        attempts: u32,
    },
    /// The kernel answered something that is not a valid reply to the request.
    #[error("unexpected netlink reply: {0}")]
    Unexpected(String),
}

fn kernel_message_suffix(message: &Option<String>) -> String {
    match message {
        Some(text) if !text.is_empty() => format!(" ({text})"),
        _ => String::new(),
    }
}

impl NetlinkError {
    /// The errno the kernel (or the socket) reported, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            NetlinkError::Io(err) => err.raw_os_error(),
            _ => None,
        }
    }
}

/// The error type of every public cni-net operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A netlink request failed; `op` names the operation and its object
    /// (e.g. `add address 10.1.0.2/24 to link 7`).
    #[error("{op}: {source}")]
    Netlink {
        /// What was being done.
        op: String,
        /// Why it failed.
        #[source]
        source: NetlinkError,
    },
    /// A link looked up by name or index does not exist.
    #[error("link {0} not found")]
    LinkNotFound(String),
    /// A namespace operation (open, setns, unshare, mount, ...) failed.
    #[error("{op} {}: {source}", path.display())]
    Namespace {
        /// What was being done (e.g. `setns into`).
        op: &'static str,
        /// The namespace file involved.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// Reading or writing a sysctl failed.
    #[error("sysctl {key}: {source}")]
    Sysctl {
        /// The sysctl key as given by the caller.
        key: String,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// A TUN/TAP device operation failed.
    #[error("{op} tun/tap device {name}: {source}")]
    Tun {
        /// What was being done.
        op: &'static str,
        /// Device name.
        name: String,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// Waiting for a condition (e.g. a link to come up) timed out.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// The caller passed something that cannot be turned into a request.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The helper thread that creates a named namespace (`unshare` affects only the thread
    /// calling it) could not be spawned.
    #[error("spawn thread for namespace {}: {source}", path.display())]
    Thread {
        /// The namespace the thread was meant to enter.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn netlink(op: impl Into<String>, source: NetlinkError) -> Self {
        Error::Netlink { op: op.into(), source }
    }

    /// The errno behind this error, if it came from the kernel or a system call.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { source, .. } => source.errno(),
            Error::Namespace { source, .. }
            | Error::Sysctl { source, .. }
            | Error::Tun { source, .. }
            | Error::Thread { source, .. } => source.raw_os_error(),
            Error::LinkNotFound(_) => Some(libc::ENODEV),
            Error::Timeout { .. } => Some(libc::ETIMEDOUT),
            Error::InvalidArgument(_) => Some(libc::EINVAL),
        }
    }

    /// True when the object operated on does not exist (ENOENT, ENODEV, ESRCH, EADDRNOTAVAIL
    /// for a missing address). Callers use it to make DEL idempotent.
    pub fn is_not_found(&self) -> bool {
        self.errno().is_some_and(crate::idempotent::errno_means_missing)
    }

    /// True when the object to create already exists (EEXIST).
    pub fn is_already_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_error_keeps_errno_and_message() {
        let err = Error::netlink(
            "add link cnt0",
            NetlinkError::Kernel { errno: libc::EEXIST, message: Some("device exists".into()) },
        );
        assert!(err.is_already_exists());
        assert!(!err.is_not_found());
        let text = err.to_string();
        assert!(text.starts_with("add link cnt0: "), "{text}");
        assert!(text.contains("(device exists)"), "{text}");
    }

    #[test]
    fn missing_link_counts_as_not_found() {
        assert!(Error::LinkNotFound("cnt9".into()).is_not_found());
        let err = Error::netlink("get link", NetlinkError::Kernel { errno: libc::ENODEV, message: None });
        assert!(err.is_not_found());
        assert_eq!(err.errno(), Some(libc::ENODEV));
    }
}
