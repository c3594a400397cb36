//! Errors of the nftables client.

use std::io;

use crate::error::NetlinkError;

/// What can go wrong talking to nf_tables.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// The netlink socket could not be opened or configured.
    #[error("cannot open NETLINK_NETFILTER socket: {0}")]
    Socket(#[source] io::Error),
    /// Sending or receiving on the socket failed.
    #[error("netlink I/O failed: {0}")]
    Io(#[source] io::Error),
    /// The kernel refused one operation of a batch; the whole batch was rolled back.
    #[error("nftables batch operation #{index} ({operation}) failed: {}", errno_text(*.errno, message))]
    Operation {
        /// Position of the failing operation in the batch (0-based, begin/end excluded).
        index: usize,
        /// What the operation was, e.g. `add rule inet cni/POSTROUTING`.
        operation: String,
        /// Positive errno, e.g. `libc::EEXIST`.
        errno: i32,
        /// The kernel's extended-ack text, when it sent one.
        message: Option<String>,
    },
    /// Every operation was accepted but the commit itself failed (batch rolled back).
    #[error("nftables batch commit failed: {}", errno_text(*.errno, message))]
    Commit {
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ack text, when it sent one.
        message: Option<String>,
    },
    /// A query (dump or get) was refused.
    #[error("nftables request {request} failed: {}", errno_text(*.errno, message))]
    Request {
        /// What was asked.
        request: String,
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ack text (or why a dump gave up), when there is one.
        message: Option<String>,
    },
    /// The kernel did not answer every message within the receive timeout.
    #[error("no answer from the kernel for {missing} of the batch's operations")]
    MissingAck {
        /// How many operations were never acknowledged.
        missing: usize,
    },
    /// The kernel's answers to a batch overflowed the socket's receive buffer, so whether
    /// the batch was applied is unknown: read the state back before retrying.
    #[error("the kernel's answers to the batch were lost (receive buffer overflow); outcome unknown")]
    AnswersLost,
    /// A message from the kernel could not be parsed.
    #[error("malformed netlink message: {0}")]
    Malformed(String),
    /// A rule or set could not be built from the given parts.
    #[error("invalid nftables object: {0}")]
    Invalid(String),
}

fn errno_text(errno: i32, message: &Option<String>) -> String {
    let text = format!("{} (errno {errno})", io::Error::from_raw_os_error(errno));
    match message {
        Some(message) if !message.is_empty() => format!("{text}: {message}"),
        _ => text,
    }
}

impl NftError {
    /// The kernel's errno, when the error came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NftError::Operation { errno, .. }
            | NftError::Commit { errno, .. }
            | NftError::Request { errno, .. } => Some(*errno),
            NftError::Socket(e) | NftError::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// `request` failed in the shared netlink loop: kernel refusals keep errno and text.
    pub(crate) fn from_netlink(request: &str, error: NetlinkError) -> NftError {
        match error {
            NetlinkError::Kernel { errno, message } => {
                NftError::Request { request: request.to_string(), errno, message }
            }
            NetlinkError::Io(err) => NftError::Io(err),
            NetlinkError::Decode(text) | NetlinkError::Unexpected(text) => NftError::Malformed(text),
            NetlinkError::DumpInterrupted { attempts } => NftError::Request {
                request: request.to_string(),
                errno: libc::EINTR,
                message: Some(format!("the ruleset changed during each of {attempts} dumps")),
            },
        }
    }

    /// The object to create already exists (`EEXIST`).
    pub fn is_already_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }

    /// The object to change or delete does not exist (`ENOENT`).
    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(libc::ENOENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_refusal_keeps_errno_and_extended_ack_text() {
        let refused = NetlinkError::Kernel { errno: libc::ENOENT, message: Some("No such chain".into()) };
        let err = NftError::from_netlink("list rules inet t c", refused);
        assert!(err.is_not_found());
        let text = err.to_string();
        assert!(text.contains("list rules inet t c"), "{text}");
        assert!(text.contains("(errno 2): No such chain"), "{text}");
    }

    #[test]
    fn a_dump_that_never_settles_says_so() {
        let err = NftError::from_netlink("list chains", NetlinkError::DumpInterrupted { attempts: 10 });
        assert_eq!(err.errno(), Some(libc::EINTR));
        assert!(err.to_string().contains("changed during each of 10 dumps"), "{err}");
    }
}
