//! The Container Network Interface specification as types.
//!
//! Everything here is data: configurations, results of every spec version from 0.1.0 to
//! 1.1.0 and the conversions between them, the error object, version negotiation and the
//! validators for names. There is no I/O, so runtimes, plugins and tests share one model.

pub mod args;
pub mod attachment;
pub mod config;
pub mod error;
pub mod fold;
pub mod result;
pub mod trace;
pub mod validate;
pub mod version;

pub use attachment::Attachment;
pub use config::{Dns, IpamConf, NetConf, NetConfList};
pub use error::{CniError, ErrorCode};
pub use result::{CniResult, Interface, IpConfig, Route};
pub use trace::TraceContext;
pub use version::{Version, VersionInfo};
