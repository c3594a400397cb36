//! Kurma network plugins built on our CNI plugins.
//!
//! The Kurma network specification packages a network plugin as a container image with
//! three executables, `/opt/network/setup`, `/opt/network/add` and `/opt/network/del`, that
//! a host daemon runs in a container sharing the host's network, PID, UTS and IPC
//! namespaces. This crate is the image side; what both sides share (the data model, the
//! image formats) is crate `kurma_model`.
//!
//! - the `kurma-netplugin` binary ([`cli`]): the three executables, running the CNI plugin
//!   the entry's `type` names from the image's `/opt/cni/bin` through libcni.
//! - `kurma-netplugin-images` (and `tools/build-netplugin-images`) builds the
//!   `cni-netplugin` and `lo-netplugin` images with [`kurma_model::image::build`].

pub mod cli;
pub mod daemon;
pub mod ops;
pub mod settings;
