//! kurma-net: the host side of Kurma's pluggable networking.
//!
//! Network plugins are container images with three executables, `/opt/network/setup`,
//! `/opt/network/add` and `/opt/network/del` (see the Kurma network specification). This
//! crate loads a Kurma configuration's `container_networks` ([`config`]), fetches and
//! unpacks each network's image ([`source`], [`registry`], and
//! [`kurma_model::image`], the same reader the image side's tests use), keeps one plugin
//! container per network in an OCI runtime ([`runtime`]) and runs `setup` in it
//! ([`Host::start_plugins`]), attaches containers to networks with `add` and detaches them
//! with `del` ([`Host::attach`], [`Host::detach`]), and keeps its state on disk so that a
//! restart re-adopts the plugin containers ([`state`]).

pub mod attach;
pub mod config;
pub mod error;
pub mod fetch;
pub mod host;
pub mod plugins;
pub mod registry;
pub mod runtime;
pub mod source;
pub mod state;
pub mod template;

pub use config::{NetworkConfig, NetworkEntry};
pub use error::{Error, ExecFailure, Result};
pub use fetch::FetchLimits;
pub use host::{Host, HostOptions, DEFAULT_LIMIT};
pub use plugins::PluginStart;
pub use state::{AttachRecord, AttachedNetwork};
