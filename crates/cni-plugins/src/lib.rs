//! Every cni-rs plugin, as modules built into one multi-call binary (`cni-plugins`), which
//! runs the plugin named by argv[0] (or by its first argument) and installs itself into a
//! CNI bin directory as one link per plugin name.
//!
//! - [`interface`]: interface plugins (loopback, bridge, ptp, ...);
//! - [`ipam`]: address management (host-local, static, ...);
//! - [`meta`]: chained plugins (portmap, firewall, tuning, ...);
//! - [`registry`]: one record per plugin (name, constructor, dry configuration stage, keys);
//! - [`keys`]: what those key lists are made of.

// What the binary, the tests and cnitool use is public (the registry, the key lists, the
// dry stages, the IPAM plugins' stores and protocols the tests drive); the plugins
// themselves are reached through the registry only.
mod common;
pub mod dry_run;
pub mod handover;
mod interface;
pub mod ipam;
pub mod keys;
mod meta;
pub mod registry;

#[cfg(test)]
mod docs_drift;
