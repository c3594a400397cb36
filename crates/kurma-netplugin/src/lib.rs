//! Kurma network plugins built on our CNI plugins.
//!
//! The Kurma network specification packages a network plugin as a container image with
//! three executables, `/opt/network/setup`, `/opt/network/add` and `/opt/network/del`, that
//! a host daemon runs in a container sharing the host's network, PID, UTS and IPC
//! namespaces. This crate is the image side and what both sides share:
//!
//! - [`model`]: the `container_networks` entry and the Kurma result (`ip4` / `ip6`), with
//!   the conversion from a CNI result. The host side parses its configuration with it.
//! - the `kurma-netplugin` binary ([`cli`]): the three executables, running the CNI plugin
//!   the entry's `type` names from the image's `/opt/cni/bin` through libcni.
//! - [`image`]: writing and reading the image formats, ACI (`manifest` + `rootfs/`) and
//!   OCI image layouts/archives, with digest checks; `kurma-netplugin-images` (and
//!   `tools/build-netplugin-images`) builds `cni-netplugin` and `lo-netplugin`.

pub mod cli;
pub mod daemon;
pub mod image;
pub mod model;
pub mod ops;
pub mod settings;
