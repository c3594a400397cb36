//! What a GC could not release. The spec has GC carry on past a failure and report them
//! all; this keeps each as (object, error) until the end, where it becomes one CNI error.

use cni_types::{CniError, ErrorCode};
use std::fmt;

/// One object GC could not release, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcFailure {
    /// What was to be released: an attachment, an address, a device, a set of rules.
    pub object: String,
    pub error: CniError,
}

/// The failures of one GC, in the order they happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcErrors(Vec<GcFailure>);

impl GcErrors {
    pub fn new() -> GcErrors {
        GcErrors::default()
    }

    pub fn push(&mut self, object: impl Into<String>, error: CniError) {
        self.0.push(GcFailure { object: object.into(), error });
    }

    /// Keeps `result`'s error, if any, as a failure to release `object`.
    pub fn record(&mut self, object: impl Into<String>, result: Result<(), CniError>) {
        if let Err(error) = result {
            self.push(object, error);
        }
    }

    /// Adds the failures, if any, of another part of the same GC.
    pub fn merge(&mut self, part: Result<(), GcErrors>) {
        if let Err(other) = part {
            self.0.extend(other.0);
        }
    }

    pub fn failures(&self) -> &[GcFailure] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when nothing failed.
    pub fn into_result(self) -> Result<(), GcErrors> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The CNI error: the message names every object, `details` gives each one's error on
    /// its own line, and the code is the failures' common code (999 when they differ).
    pub fn to_cni_error(&self) -> CniError {
        let code = match self.0.first() {
            Some(first) if self.0.iter().all(|f| f.error.code == first.error.code) => first.error.code,
            _ => ErrorCode::Internal.as_u32(),
        };
        let details: Vec<String> = self.0.iter().map(|f| format!("{}: {}", f.object, f.error.msg)).collect();
        CniError::new(code, self.to_string()).with_details(details.join("\n"))
    }
}

impl fmt::Display for GcErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("GC released everything"),
            [one] => write!(f, "GC could not release {}: {}", one.object, one.error.msg),
            many => {
                let objects: Vec<&str> = many.iter().map(|f| f.object.as_str()).collect();
                write!(f, "GC could not release {} objects: {}", many.len(), objects.join(", "))
            }
        }
    }
}

impl std::error::Error for GcErrors {}

impl From<GcErrors> for CniError {
    fn from(errors: GcErrors) -> CniError {
        errors.to_cni_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_failure_is_the_message_and_many_are_listed_in_details() {
        let mut errors = GcErrors::new();
        errors.record("10.0.0.2", Ok(()));
        assert!(errors.clone().into_result().is_ok());
        errors.record("10.0.0.3", Err(CniError::io("permission denied")));
        let one = CniError::from(errors.clone());
        assert_eq!((one.code, one.msg.as_str()), (5, "GC could not release 10.0.0.3: permission denied"));
        errors.push("chain cni-1", CniError::internal("busy"));
        let many = errors.to_cni_error();
        assert_eq!(many.code, 999, "codes differ");
        assert_eq!(many.msg, "GC could not release 2 objects: 10.0.0.3, chain cni-1");
        assert_eq!(many.details, "10.0.0.3: permission denied\nchain cni-1: busy");
        assert_eq!(errors.failures().len(), 2);
    }
}
