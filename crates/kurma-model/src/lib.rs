//! What the two sides of Kurma networking agree on, in one crate both depend on: the
//! netplugin executables (`kurma-netplugin`, the image side) and the host that fetches
//! their images and runs them (`kurma-net`). Neither side depends on the other.
//!
//! - [`network`]: the `container_networks` entry and the Kurma result (`ip4` / `ip6`), with
//!   the conversion from a CNI result. The host parses its configuration with it, the
//!   netplugin the entry it is given.
//! - [`image`]: writing and reading the image formats, ACI (`manifest` + `rootfs/`) and
//!   OCI image layouts/archives, with digest checks and size limits on everything read.

pub mod image;
pub mod network;
